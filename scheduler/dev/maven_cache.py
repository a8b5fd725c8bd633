"""Jars fetched by Maven from a pom kept in the package, into the cache outside the repository.

Shared by the broker, the Connect worker and its plugins: each names a home directory and a pom;
the copy is redone only when the pom (or the extra inputs it depends on) changes."""
from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path


class MavenError(Exception):
    """Maven is missing or could not resolve; the message says what to do."""


def mvn_executable(home: Path) -> str:
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(f"`mvn` was not found on PATH: install Apache Maven (e.g. `apt-get install maven`); "
                         f"it downloads the jars once into {home}")
    return mvn


def run_maven(arguments: list[str], cwd: Path, what: str) -> str:
    """Run `mvn -B ARGS` and return its output; a failure raises with the tail of Maven's output."""
    result = subprocess.run([mvn_executable(cwd), "-B", *arguments], cwd=cwd, capture_output=True, text=True)
    output = result.stdout + result.stderr
    if result.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-25:])
        raise MavenError(f"Maven could not {what} (check network access to Maven Central):\n{tail}")
    return output


def cached_build(home: Path, name: str, digest: str, build: Callable[[Path], None]) -> Path:
    """`home/name`, built by `build(staging_dir)` unless a complete build with `digest` is there.

    The marker is written only after a complete build, so an interrupted download or an edited
    input triggers a fresh build instead of a broken classpath; a file lock makes concurrent
    callers (two test sessions, two CLI starts) build once."""
    target, marker = home / name, home / f"{name}.complete"
    if _marker_matches(marker, digest):
        return target
    home.mkdir(parents=True, exist_ok=True)
    with open(home / f".{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _marker_matches(marker, digest):
            return target
        marker.unlink(missing_ok=True)
        staging = home / f"{name}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        build(staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        marker.write_text(digest + "\n")
    return target


def copy_dependencies(home: Path, name: str, pom: bytes, what: str) -> Path:
    """The runtime dependencies of `pom`, copied into `home/name` once per pom content."""

    def build(staging: Path) -> None:
        pom_file = home / f"{name}-pom.xml"
        pom_file.write_bytes(pom)
        run_maven(["-q", "-f", str(pom_file), "dependency:copy-dependencies", f"-DoutputDirectory={staging}"],
                  home, f"fetch {what}")

    return cached_build(home, name, hashlib.sha256(pom).hexdigest(), build)


def _marker_matches(marker: Path, digest: str) -> bool:
    try:
        return marker.read_text().strip() == digest
    except FileNotFoundError:
        return False
