"""Where a scheduler process keeps its RocksDB stores, and the lock that makes that place its own.

The layout is `<state dir>/<prefix>/<instance id>/p<N>` (owned and standby partitions alike), with a
`LOCK` file beside the stores. Two processes that opened the same stores (two on one host under one
instance id, or replicas sharing a volume) would write over each other's checkpoints and RocksDB files;
the instance id in the path keeps differently named processes apart, and an exclusive `flock` on `LOCK`,
held for the process's life, refuses a second one under the same id. The kernel drops the lock when the
process dies, even by kill -9, so a restart never finds a stale one.

A restarted process finds its stores only under the same instance id: a new id (e.g. a random host
name per container start) begins with empty stores and restores every partition from the changelogs.
"""
from __future__ import annotations

import errno
import fcntl
import os
import re
from pathlib import Path

LOCK_NAME = "LOCK"
# The instance id is also part of the transactional id; here it is one path component.
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class StateDirInUse(RuntimeError):
    """Another live process holds the instance's state dir."""


def instance_dir(state_dir: Path, prefix: str, instance_id: str) -> Path:
    """The instance's own directory under the state dir; refuses ids that would leave it (`..`, `/`)."""
    if not _SAFE_ID.fullmatch(instance_id):
        raise ValueError(f"instance id {instance_id!r} must be letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit: it names a directory")
    return state_dir / prefix / instance_id


class StateDirLock:
    """An exclusive, non-blocking lock on `<directory>/LOCK`, held until `close` (or the process's end)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.path = directory / LOCK_NAME
        directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise StateDirInUse(
                f"state dir {directory} is in use by another scheduler process{holder}: give each process its "
                "own --instance-id (or --state-dir)") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())  # for the refusal's message only; the flock is the lock
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> StateDirLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_holder(fd: int) -> str:
    text = os.pread(fd, 32, 0).decode(errors="replace").strip()
    return f" (pid {text})" if text.isdigit() else ""
