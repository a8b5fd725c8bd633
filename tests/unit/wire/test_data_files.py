"""A regular (non-editable) install has no repository beside the package: the schemas and the topic
layout must be shipped by pyproject's data-files to where `data_dir` looks for them then."""
from __future__ import annotations

import shutil
import sys
import tomllib
from pathlib import Path

import pytest

from scheduler.wire import data_files
from scheduler.wire.schemas import schema_dir
from scheduler.wire.topology import Topology, default_topology_file

REPO = Path(__file__).resolve().parents[3]


def shipped() -> dict[str, list[str]]:
    """pyproject's data-files: install directory (under the prefix) -> repository files it gets."""
    with (REPO / "pyproject.toml").open("rb") as fh:
        table = tomllib.load(fh)["tool"]["setuptools"]["data-files"]
    return {target: sorted(str(p.relative_to(REPO)) for pattern in globs for p in REPO.glob(pattern))
            for target, globs in table.items()}


def test_data_files_ship_every_schema_and_the_topology() -> None:
    files = shipped()
    assert files[str(data_files.SHARE_DIR / "schemas")] == sorted(
        str(p.relative_to(REPO)) for p in (REPO / "schemas").glob("*.avsc"))
    assert files[str(data_files.SHARE_DIR / "schemas" / "history")] == sorted(
        str(p.relative_to(REPO)) for p in (REPO / "schemas" / "history").glob("*.avsc"))
    assert files[str(data_files.SHARE_DIR / "topologies")] == ["topologies/scheduler.toml"]


def test_without_a_repository_beside_the_package_the_installed_copies_are_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout a wheel install leaves: the package in site-packages, the data under the prefix."""
    prefix = tmp_path / "venv"
    for target, files in shipped().items():
        (prefix / target).mkdir(parents=True, exist_ok=True)
        for name in files:
            shutil.copy(REPO / name, prefix / target)
    monkeypatch.setattr(data_files, "__file__", str(prefix / "lib" / "site-packages" / "scheduler" / "wire" / "x.py"))
    monkeypatch.setattr(sys, "prefix", str(prefix))
    monkeypatch.delenv("SCHEDULER_SCHEMA_DIR", raising=False)
    monkeypatch.delenv("SCHEDULER_TOPOLOGY_FILE", raising=False)
    assert default_topology_file() == prefix / data_files.SHARE_DIR / "topologies" / "scheduler.toml"
    assert Topology.load().schedule_partitions > 0
    assert schema_dir() == prefix / data_files.SHARE_DIR / "schemas"
    assert (schema_dir() / "Occurrence.avsc").is_file()


def test_in_a_checkout_the_repository_files_are_read() -> None:
    assert default_topology_file() == REPO / "topologies" / "scheduler.toml"
    assert data_files.data_dir("schemas") == REPO / "schemas"
