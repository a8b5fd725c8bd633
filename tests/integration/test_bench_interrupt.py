"""Ctrl-C of `bench/peak.py` during loading stops everything it started (issue 16): its broker, its engine and
its reader process, none left behind. The bench runs for real, with its own broker, and gets a real SIGINT."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


Process = tuple[int, str]  # pid and its start time: a pid the kernel gives again is another process


def stat_of(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def descendants(root: int) -> set[Process]:
    """Every live process under `root` (from /proc: pid -> parent), zombies excluded."""
    parents: dict[Process, int] = {}
    for entry in os.listdir("/proc"):
        fields = stat_of(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[0] != "Z":
            parents[(int(entry), fields[19])] = int(fields[1])
    found: set[Process] = set()
    frontier = {root}
    while frontier:
        fresh = {proc for proc, parent in parents.items() if parent in frontier} - found
        found |= fresh
        frontier = {pid for pid, _ in fresh}
    return found


def alive(proc: Process) -> bool:
    fields = stat_of(proc[0])
    return fields is not None and fields[0] != "Z" and fields[19] == proc[1]


def command_of(proc: Process) -> str:
    try:
        return Path(f"/proc/{proc[0]}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "?"


def test_ctrl_c_during_loading_leaves_no_process_behind(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "KAFKA_BOOTSTRAP_SERVERS"}  # the bench starts its broker
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "wb") as stderr:
        bench = subprocess.Popen([sys.executable, "bench/peak.py", "--count", "30000", "--tenants", "2",
                                  "--lead", "600", "--bystanders-per-s", "0"], cwd=REPO, env=env,
                                 stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + 480  # a broker, topics and an engine to start on a loaded machine
        started: set[Process] = set()
        while "create " not in stderr_path.read_text(errors="replace"):  # loading the burst
            assert bench.poll() is None, stderr_path.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "the bench never began loading"
            started |= descendants(bench.pid)
            time.sleep(0.2)
        started |= descendants(bench.pid)
        commands = {proc: command_of(proc) for proc in started}
        assert any("java" in c for c in commands.values()), f"no broker among {commands}"
        assert any("scheduler run" in c for c in commands.values()), f"no engine among {commands}"
        assert any("multiprocessing" in c for c in commands.values()), f"no reader among {commands}"
        bench.send_signal(signal.SIGINT)
        try:
            code = bench.wait(120)
        except subprocess.TimeoutExpired:
            pytest.fail("still stopping 120 s after Ctrl-C; its log ends:\n"
                        + stderr_path.read_text(errors="replace")[-3000:])
        assert code == 130, stderr_path.read_text(errors="replace")[-3000:]
        deadline = time.monotonic() + 60
        while any(alive(proc) for proc in started) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = {proc: commands[proc] for proc in started if alive(proc)}
        assert not left, f"left running after Ctrl-C: {left}"
    finally:
        if bench.poll() is None:
            bench.kill()
        for proc in descendants(bench.pid) | started:
            if alive(proc):
                os.kill(proc[0], signal.SIGKILL)
