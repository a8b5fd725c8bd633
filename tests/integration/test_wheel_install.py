"""A regular install from the wheel, no repository beside it, finds the schemas and the topic layout.

Builds the wheel from a copy of the sources (pip's isolated build fetches setuptools, so this needs
the package index or pip's cache), installs it into a fresh venv without its dependencies, and
imports it there with this environment's dependencies on the path."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "scheduler", "schemas", "topologies")

PROBE = """
import scheduler
from scheduler.wire.schemas import schema_dir
from scheduler.wire.topology import Topology
print(scheduler.__file__)
print(schema_dir())
print(Topology.load().source)
"""


def run(*command: str | Path, **kwargs) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, **kwargs)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_a_wheel_install_reads_its_own_schemas_and_layout(tmp_path: Path) -> None:
    source = tmp_path / "src"  # a copy: building in the worktree would leave build/ and egg-info there
    source.mkdir()
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, source / name)
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp_path / "dist", source)
    wheel = next((tmp_path / "dist").glob("*.whl"))
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", wheel)
    env = {**os.environ, "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    for name in ("SCHEDULER_SCHEMA_DIR", "SCHEDULER_TOPOLOGY_FILE"):
        env.pop(name, None)
    package, schemas, layout = run(python, "-c", PROBE, cwd=tmp_path, env=env).split()
    share = venv / "share" / "kafka-job-scheduler"
    assert Path(package).is_relative_to(venv)
    assert Path(schemas) == share / "schemas"
    assert Path(layout) == share / "topologies" / "scheduler.toml"
