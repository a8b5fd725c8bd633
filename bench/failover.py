"""Failover with and without standbys: `python bench/failover.py [--bootstrap HOST:PORT] [--idle 500000] [--per-s 300]`.

Per mode (standbys on, then off; a fresh topic prefix and state each): two `scheduler run` processes split the
partitions; `--idle` one-shots due in 60 days are loaded (pipelined CREATE commands, waited for until
ACCEPTED; with `--preload-idle`, written into the schedules changelog before the processes start, which then
restore them: bench/idle_states.py), then `--per-s` strict one-shots due every second for 20 s before and 60 s
after the kill, across the partitions. With standbys the survivor's warm copies are waited for (standby lag
near 0), then the process owning half of the partitions is killed with kill -9. Reported side by side: time
from the kill to the first dispatch of a moved partition (an occurrence due after the kill, visible to a
read_committed reader) and to every moved partition dispatching again, the lag p50/p99/max of the occurrences
due in the 60 s after the kill, missing ones, the lag before the kill (the cost of tailing on the turns),
engine CPU and state on disk. Not included: a replacement process (the survivor takes everything), broker-side
costs.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from bench_engine import create_all, scrape
from burst_common import REPO, RESULTS, rfc3339
from idle_states import write_idle_states
from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.kafka.admin import delete_prefixed_topics, ensure_topics
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import partition_for
from scheduler.wire.topology import Topology

TOPOLOGY = Topology.load()
PARTITIONS = TOPOLOGY.schedule_partitions
CODEC = Codec.default()
IDLE, STEADY = "idle", "steady"
BEFORE_S, AFTER_S = 20, 60  # steady occurrences due before and after the kill
MODES = {"standbys": ("--standbys", "1"), "no standbys": ("--standbys", "0")}
OWNERSHIP = re.compile(r"(assigned|revoked) partitions \[([\d, ]*)\]")
# The survivor's log lines that time a takeover, after the kill (scheduler/engine/assignment.py, previous_owner.py,
# restore.py): the assignment received, the dead owner fenced, the stage producers opened, restores, dispatch.
DISPATCHING = re.compile(r"partition (\d+) dispatching")
PHASES = {"assigned": re.compile(r"partitions \[[\d, ]*\] added"), "fenced": re.compile(r"fenced \["),
          "stages opened": re.compile(r"stage producers of partitions"),
          "restored": re.compile(r"restored partition \d+:"), "dispatching": DISPATCHING}
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) ")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Member:
    """One `scheduler run` child."""

    name: str
    proc: subprocess.Popen
    log_path: Path
    state: Path
    metrics_port: int

    def owned(self) -> set[int]:
        owned: set[int] = set()
        for verb, numbers in OWNERSHIP.findall(self.log_path.read_text(errors="replace")):
            found = {int(n) for n in numbers.split(",") if n.strip()}
            owned = found if verb == "assigned" else owned - found
        return owned

    def dispatching(self) -> set[int]:
        return {int(n) for n in DISPATCHING.findall(self.log_path.read_text(errors="replace"))}

    def cpu_s(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def disk_mb(self) -> float:
        return sum(f.stat().st_blocks * 512 for f in self.state.rglob("*") if f.is_file()) / 1e6


def phases(log_path: Path, killed_ms: int) -> dict[str, int]:
    """Milliseconds from the kill to the last line of each phase in the survivor's log (-1: not logged)."""
    found = dict.fromkeys(PHASES, -1)
    for line in log_path.read_text(errors="replace").splitlines():
        stamp = STAMP.match(line)
        if stamp is None:
            continue
        at_ms = int(time.mktime(time.strptime(stamp.group(1), "%Y-%m-%d %H:%M:%S")) * 1000) + int(stamp.group(2))
        if at_ms < killed_ms:
            continue
        for phase, pattern in PHASES.items():
            if pattern.search(line):
                found[phase] = at_ms - killed_ms
    return found


def stop_members(members: list[Member]) -> None:
    """SIGTERM every process still running; a SIGKILL only for one that has not stopped in 30 s."""
    for member in members:
        if member.proc.poll() is None:
            member.proc.send_signal(signal.SIGTERM)
            try:
                member.proc.wait(30)
            except subprocess.TimeoutExpired:
                member.proc.kill()


def start(bootstrap: str, prefix: str, work: Path, name: str, mode_args: tuple[str, ...]) -> Member:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
    log_path, port = work / f"{name}.log", free_port()
    proc = subprocess.Popen([sys.executable, "-m", "scheduler", "run", "--instance-id", name, "--open-tenants",
                             "--state-dir", str(work / name), "--metrics-port", str(port), *mode_args],
                            cwd=REPO, env=env, stdout=open(log_path, "ab"), stderr=subprocess.STDOUT)
    return Member(name, proc, log_path, work / name, port)


def wait_split(members: list[Member], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        owned = [m.owned() for m in members]
        if all(owned) and sum(map(len, owned)) == PARTITIONS and set().union(*owned) == set(range(PARTITIONS)):
            return
        time.sleep(0.5)
    raise RuntimeError(f"partitions never split between {[m.name for m in members]}")


def wait_restored(members: list[Member], timeout: float) -> None:
    """Until every member dispatches every partition it owns (after a start on a preloaded changelog)."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if all(m.owned() <= m.dispatching() for m in members):
            return
        time.sleep(0.5)
    raise RuntimeError(f"restores of {[m.name for m in members]} not done in {timeout:.0f} s")


def wait_warm(member: Member, count: int, timeout: float = 600) -> float:
    """Until `member` keeps `count` standby copies within a few records of the changelogs' ends."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        metrics = scrape(member.metrics_port)
        if metrics.get("scheduler_standby_partitions") == count and metrics.get(
                "scheduler_standby_lag_records", 1e9) <= 10 * count:
            return time.monotonic() - started
        time.sleep(0.5)
    raise RuntimeError(f"standbys of {member.name} never caught up: {scrape(member.metrics_port)}")


def seed_steady(client: SchedulerClient, first_ms: int, per_s: int) -> dict[str, tuple[int, int]]:
    """Strict one-shots due every second from `first_ms`; returns occurrence id -> (due, partition)."""
    expected, ids = {}, []
    for second in range(BEFORE_S + AFTER_S):
        for n in range(per_s):
            due_ms = first_ms + second * 1000 + n * 1000 // per_s
            sid = f"steady-{second:03d}-{n:05d}"
            ids.append(client.send("CREATE", sid, STEADY, spec=make_spec("once", rfc3339(due_ms))))
            expected[sid] = (due_ms, partition_for(sid.encode(), PARTITIONS))
    rejected = [r for r in client.wait(ids, timeout_s=600).values() if r["status"] != "ACCEPTED"]
    if rejected:
        raise RuntimeError(f"{len(rejected)} steady creates rejected, e.g. {rejected[0]}")
    return expected


def reader(bootstrap: str, prefix: str) -> Consumer:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"failover-{uuid.uuid4()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "fetch.wait.max.ms": 20})
    topics = [TOPOLOGY.topic_name("occurrences", prefix, tenant=STEADY, priority=p) for p in TOPOLOGY.priorities]
    metadata = consumer.list_topics(timeout=30).topics
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in metadata[t].partitions])
    return consumer


def read(consumer: Consumer, seen: dict[str, int], until_s: float, done: int | None = None) -> None:
    """schedule id -> when the reader first saw its occurrence, until `until_s` or `done` have come."""
    while time.time() < until_s and (done is None or len(seen) < done):
        for msg in consumer.consume(5000, timeout=0.1):
            if msg.error() is None:
                seen.setdefault(CODEC.decode("Occurrence", msg.value())["schedule_id"], int(time.time() * 1000))


def percentile(values: list[int], q: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else -1


def one_run(bootstrap: str, mode: str, idle: int, per_s: int, preload: bool) -> dict[str, float]:
    prefix = f"fo{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=[IDLE, STEADY], timeout=120)
    work = Path(tempfile.mkdtemp(prefix="failover-"))
    members: list[Member] = []
    far_ms = (math.ceil(time.time()) + 60 * 86_400) * 1000
    try:
        if preload:
            seed_s = write_idle_states(bootstrap, TOPOLOGY.topic_name("schedules", prefix), idle, PARTITIONS, far_ms)
            print(f"{mode}: {idle:,} idle states written in {seed_s:.0f} s", file=sys.stderr)
        started = time.monotonic()
        members = [start(bootstrap, prefix, work, name, MODES[mode]) for name in ("a", "b")]
        wait_split(members, 120 + idle / 20_000)
        victim, survivor = members
        cpu0 = 0.0 if preload else sum(m.cpu_s() for m in members)  # preloaded: the restore from the start
        with SchedulerClient(bootstrap, prefix, timeout_s=600) as client:
            if preload:
                wait_restored(members, 120 + idle / 10_000)
                restore_s = time.monotonic() - started
            else:
                seed_s = create_all(client, [(f"idle-{n:08d}", IDLE) for n in range(idle)], far_ms, 0, "idle")
                restore_s = 0.0
            cpu_seed = sum(m.cpu_s() for m in members) - cpu0
            warm_s = wait_warm(survivor, len(victim.owned()), 600 + idle / 5_000) if mode == "standbys" else 0.0
            # The steady set is created at the rate the idle load measured (1,000/s if preloaded), with room to spare.
            create_rate = idle / seed_s if idle and not preload else 1000
            lead_s = per_s * (BEFORE_S + AFTER_S) / create_rate * 3 + 20
            first_ms = (math.ceil(time.time() + lead_s)) * 1000
            expected = seed_steady(client, first_ms, per_s)
        moved = victim.owned()
        consumer = reader(bootstrap, prefix)
        seen: dict[str, int] = {}
        kill_ms = first_ms + BEFORE_S * 1000
        late = time.time() > first_ms / 1000
        read(consumer, seen, first_ms / 1000)
        cpu1, steady_from = sum(m.cpu_s() for m in members), time.monotonic()
        read(consumer, seen, kill_ms / 1000)
        cpu_steady = (sum(m.cpu_s() for m in members) - cpu1) / (time.monotonic() - steady_from)
        disk = {m.name: m.disk_mb() for m in members}
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        killed_ms = int(time.time() * 1000)
        read(consumer, seen, kill_ms / 1000 + AFTER_S + 120, done=len(expected))
        consumer.close()
        after = {sid: v for sid, v in expected.items() if v[0] >= killed_ms}
        lags = [seen[sid] - due for sid, (due, _) in after.items() if sid in seen]
        before = [seen[sid] - due for sid, (due, _) in expected.items() if due < kill_ms - 1000 and sid in seen]
        firsts = {}
        for sid, (_, partition) in after.items():
            if partition in moved and sid in seen:
                firsts[partition] = min(firsts.get(partition, seen[sid]), seen[sid])
        return {**phases(survivor.log_path, killed_ms), "idle": idle, "seed_rate": idle / seed_s if idle else 0.0,
                "seed_s": seed_s if idle else 0.0, "restore_s": restore_s, "warm_s": warm_s, "moved": len(moved),
                "first_ms": min(firsts.values(), default=killed_ms - 1) - killed_ms,
                "all_moved_ms": (max(firsts.values()) - killed_ms) if len(firsts) == len(moved) else -1,
                "p50": percentile(lags, 0.5), "p99": percentile(lags, 0.99), "max": max(lags, default=-1),
                "due_after": len(after), "missing": len(after) - len(lags), "before_p99": percentile(before, 0.99),
                "cpu_seed_s": cpu_seed, "cpu_steady_share": cpu_steady, "late": late,
                "disk_victim_mb": disk["a"], "disk_survivor_mb": disk["b"]}
    finally:
        stop_members(members)
        delete_prefixed_topics(bootstrap, prefix)
        for member in members:
            shutil.rmtree(member.state, ignore_errors=True)
        print(f"{mode}: logs in {work}", file=sys.stderr)


def main() -> int:
    cli = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cli.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"))
    cli.add_argument("--idle", type=int, default=500_000, help="idle schedules (the issue's figure: 5,000,000)")
    cli.add_argument("--per-s", type=int, default=300, help="strict one-shots due every second")
    cli.add_argument("--preload-idle", action="store_true",
                     help="write the idle set into the schedules changelog before the processes start, instead of "
                          "creating it through commands (bench/idle_states.py)")
    args = cli.parse_args()
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(1))  # the finally blocks stop the children
    rows = {mode: one_run(args.bootstrap, mode, args.idle, args.per_s, args.preload_idle) for mode in MODES}
    lines = [f"# bench/failover: kill -9 of one of two processes, {args.idle:,} idle schedules, "
             f"{args.per_s}/s strict one-shots", "", f"Command: `python bench/failover.py {' '.join(sys.argv[1:])}`",
             f"Run {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; group session timeout 6 s.", "",
             "| | kill → first dispatch of a moved partition (ms) | kill → all moved partitions (ms) | "
             "lag p50 | p99 | max (ms) | due in the 60 s after | missing | lag p99 before the kill (ms) | "
             "engine CPU while loading (s) | engine CPU before the kill (cores) | state on disk a / b (MB) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for mode, r in rows.items():
        lines.append(f"| {mode} | {r['first_ms']:,} | {r['all_moved_ms']:,} | {r['p50']:,} | {r['p99']:,} | "
                     f"{r['max']:,} | {r['due_after']:,} | {r['missing']:,} | {r['before_p99']:,} | "
                     f"{r['cpu_seed_s']:.0f} | {r['cpu_steady_share']:.2f} | "
                     f"{r['disk_victim_mb']:.0f} / {r['disk_survivor_mb']:.0f} |")
    lines += ["", "Where the time went, from the survivor's log: milliseconds from the kill to the last line of each "
              "step (the group's session timeout is in the first).", "",
              "| | " + " | ".join(PHASES) + " |", "|---|" + "---:|" * len(PHASES)]
    lines += [f"| {mode} | " + " | ".join(f"{r[phase]:,}" for phase in PHASES) + " |" for mode, r in rows.items()]
    if args.preload_idle:
        lines += ["", f"The idle set was written into the schedules changelog before the processes started "
                  f"(bench/idle_states.py, {rows['standbys']['seed_s']:.0f} / {rows['no standbys']['seed_s']:.0f} s "
                  "with / without standbys), not created through commands: the engine CPU while loading is the "
                  "two processes' start and restore (interpreter start included), which took "
                  f"{rows['standbys']['restore_s']:.0f} / {rows['no standbys']['restore_s']:.0f} s from the start "
                  "to every partition dispatching.", ""]
    else:
        lines += ["", f"Loading ran at {rows['standbys']['seed_rate']:,.0f} / {rows['no standbys']['seed_rate']:,.0f} "
                  "creates/s (with / without standbys).", ""]
    lines += [f"The survivor's standbys were within a few records of the changelog ends "
              f"{rows['standbys']['warm_s']:.1f} s after the load.", ""]
    lines += [f"The steady set was still being created at its first due instant ({mode}): the lag before the kill "
              "includes that." for mode, r in rows.items() if r["late"]]
    path = RESULTS / f"failover-{args.idle}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
