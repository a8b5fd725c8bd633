"""The bench's `scheduler run` child, the creates that load it and what it reports (bench/burst.py)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from burst_common import PAYLOAD, PRIORITY, REPO, TOPOLOGY, end_progress, progress, rfc3339
from children import stop_group
from scheduler.broker.local import free_port
from scheduler.control.bulk import CreateRequest
from scheduler.control.client import SchedulerClient, make_spec


class Engine:
    """`scheduler run` as a child process, with its log next to the other run files."""

    def __init__(self, bootstrap: str, prefix: str, workdir: Path, args: list[str]) -> None:
        self.log_path = workdir / f"engine-{time.time_ns()}.log"
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scheduler", "run", "--instance-id", "bench", "--open-tenants", "--state-dir",
             str(workdir / "state"), *args],
            cwd=REPO, env=env, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True)

    def wait_assigned(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited early:\n{self.tail()}")
            if "assigned partitions" in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        raise RuntimeError(f"engine got no partitions in {timeout}s:\n{self.tail()}")

    def wait_dispatching(self, partitions: int, timeout: float) -> float:
        """Until every partition's restore is done (they run after the assignment, scheduler/engine/assignment.py);
        returns the longest time from a partition's assignment to its dispatching."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"engine exited early:\n{self.tail()}")
            found = [float(line.split(" dispatching ", 1)[1].split(" s ", 1)[0])
                     for line in self.log_path.read_text(errors="replace").splitlines()
                     if " dispatching " in line and "after its assignment" in line]
            if len(found) >= partitions:
                return max(found)
            time.sleep(0.2)
        raise RuntimeError(f"partitions not all restored in {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        stop_group(self.proc, 30)


def create_all(client: SchedulerClient, plan: list[tuple[str, str]], due_ms: int, window_ms: int,
               label: str) -> float:
    """CREATE every (schedule_id, tenant) through the client's bulk path (scheduler.control.bulk) and wait until
    all are ACCEPTED; returns the seconds taken."""
    spec = make_spec("once", rfc3339(due_ms), priority=PRIORITY, flexible_window_ms=window_ms, payload=PAYLOAD)
    started = time.monotonic()
    total = len(plan)
    requests = (CreateRequest(tenant, spec, schedule_id=sid) for sid, tenant in plan)
    for done, (_, result) in enumerate(client.create_stream(requests, timeout_s=600), 1):
        if result["status"] != "ACCEPTED":
            raise RuntimeError(f"a create was rejected: {result}")
        if done % 10_000 == 0 or done == total:
            progress(label, done, total, f"accepted, {done / (time.monotonic() - started):,.0f}/s")
    end_progress()
    return time.monotonic() - started


def scrape(port: int) -> dict[str, float]:
    """The engine's own metrics, summed over label sets (a bench needs totals, not series)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "le" not in sample.labels:
                totals[sample.name] += sample.value
    return totals


def dir_bytes(path: Path, name_prefix: str = "", suffix: str = "") -> int:
    """Bytes actually allocated: Kafka preallocates 10 MiB sparse index files, so st_size would overstate."""
    if not path.exists():
        return 0
    return sum(f.stat().st_blocks * 512 for d in path.iterdir() if d.name.startswith(name_prefix)
               for f in (d.rglob("*") if d.is_dir() else [d]) if f.is_file() and f.name.endswith(suffix))


def measure_state(bootstrap: str, prefix: str, workdir: Path, engine: Engine, engine_args: list[str],
                  own_broker: bool, schedules: int) -> tuple[dict[str, Any], Engine]:
    """Bytes of RocksDB and changelog per schedule, then the time to rebuild the deleted local state."""
    engine.stop()
    state_bytes = dir_bytes(workdir / "state")
    changelog = {}
    if own_broker:
        for key in ("schedules", "timeline-changelog"):
            name = TOPOLOGY.topic_name(key, prefix)
            changelog[key] = dir_bytes(workdir / "kafka" / "kraft", name + "-", ".log")
    shutil.rmtree(workdir / "state")
    port = free_port()
    args = [a if engine_args[i - 1] != "--metrics-port" else str(port) for i, a in enumerate(engine_args)]
    started = time.monotonic()
    restarted = Engine(bootstrap, prefix, workdir, args)
    restarted.wait_assigned(timeout=1800)
    restore_s = restarted.wait_dispatching(TOPOLOGY.schedule_partitions, timeout=1800)
    wall = time.monotonic() - started
    metrics = scrape(port)
    result = {
        "schedules": schedules, "rocksdb_bytes": state_bytes, "changelog_bytes": changelog,
        "restore_wall_s": wall, "restore_s": restore_s,
        "restored_records": metrics.get("scheduler_restore_records_total", 0.0),
    }
    return result, restarted
