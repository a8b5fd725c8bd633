"""What a bench starts is stopped however the bench ends: an error, Ctrl-C (SIGINT) or SIGTERM, in any phase.

Every child runs in its own process group: the engine (`start_new_session`), the local broker (its own
session, scheduler/broker/local.py), the reader and the ceiling (`detach` first thing). So a terminal's Ctrl-C
reaches the bench alone, and the bench stops them in order (the reader before the broker it reads from),
each group with SIGTERM, then SIGKILL. The reader also watches its parent and stops if it goes.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, Protocol, TypeVar

SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=Closable)


def detach() -> int:
    """In a child process: a process group of its own. Returns the parent's pid, to notice being orphaned."""
    os.setpgrp()
    return os.getppid()


def stop_group(proc: subprocess.Popen[Any], timeout: float) -> None:
    """SIGTERM to the child's process group, SIGKILL if it is still there after `timeout`."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout)
    except ProcessLookupError:
        return
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def stop_child(process: Any, timeout: float) -> None:
    """A multiprocessing child: time to finish (its stop event is set), then SIGTERM, then SIGKILL."""
    if process.pid is None:
        return
    process.join(timeout)
    for hard in (False, True):
        if not process.is_alive():
            return
        process.kill() if hard else process.terminate()
        process.join(5)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM is taken as Ctrl-C: either raises KeyboardInterrupt, so every `finally` of the bench runs.

    SIGINT too is set here, not inherited: a bench started from a shell's background job (`nohup ... &`, a CI
    runner) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt for it, so a Ctrl-C sent
    to the bench would be dropped and its children left running."""
    previous = signal.signal(signal.SIGTERM, _interrupt)
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Stopping the children runs to its end: a second Ctrl-C waits until it has (then ends the bench)."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextmanager
def stop_step(label: str) -> Iterator[None]:
    """One step of a bench's shutdown, its duration on stderr: when stopping is slow, the log says which child
    was (each step has its own bound; a test of Ctrl-C bounds their sum)."""
    started = time.monotonic()
    try:
        yield
    finally:
        print(f"stop: {label} in {time.monotonic() - started:.1f}s", file=sys.stderr)


@contextmanager
def closed_at_exit(resource: C, label: str) -> Iterator[C]:
    """`resource`, closed at the block's end as a timed stop step."""
    try:
        yield resource
    finally:
        with stop_step(label):
            resource.close()
