"""Leases: what heartbeats cost per running occurrence, and how long a dead worker's occurrence waits.

Real processes on a real broker: one `scheduler run`, `scheduler worker`s running `hold` (below).
1. Cost: one occurrence held by one worker for `--window` seconds with lease `--lease-ms`; the
   records added meanwhile to the attempts topic (heartbeats and their transaction markers) and to
   the changelogs the engine writes per heartbeat (occurrence status, lease index) are counted from
   the partitions' end offsets, and scaled to records per minute.
2. Death to retry: two workers (session timeout `--session-timeout-ms`, below the lease), the one
   running the occurrence is killed with SIGKILL, and the time until the other starts it is taken
   from the handlers' own notes (same clock), over `--rounds` rounds.

    python bench/leases.py [--lease-ms 3000] [--window 30] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from confluent_kafka import Consumer, TopicPartition  # noqa: E402

from scheduler.broker.local import LocalBroker, free_port  # noqa: E402
from scheduler.control.client import SchedulerClient, make_spec  # noqa: E402
from scheduler.kafka.admin import delete_prefixed_topics, ensure_topics  # noqa: E402
from scheduler.wire.topology import Topology  # noqa: E402
from scheduler.worker.heartbeat import interval_s  # noqa: E402

TENANT = "bench"
NOTES = "LEASE_BENCH_NOTES"
COUNTED = ("attempts", "occurrence-status-changelog", "admission-changelog")


def hold(occurrence, ctx) -> None:  # the handler the bench's workers run (`--handler leases:hold`)
    with open(os.environ[NOTES], "a") as out:
        out.write(json.dumps({"schedule": occurrence.schedule_id, "attempt": occurrence.attempt,
                              "pid": os.getpid(), "at": time.time()}) + "\n")
    ctx.cancelled.wait(float(occurrence.payload.decode()))


def notes(path: Path, schedule_id: str) -> list[dict]:
    found = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
    return [n for n in found if n["schedule"] == schedule_id]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def end_offsets(bootstrap: str, topics: list[str]) -> dict[str, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lease-bench-offsets"})
    try:
        totals = {}
        for topic in topics:
            partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
            totals[topic] = sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                                for p in partitions)
        return totals
    finally:
        consumer.close()


def at(seconds: float) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


class Run:
    def __init__(self, bootstrap: str, prefix: str, workdir: Path) -> None:
        self.bootstrap, self.prefix, self.workdir = bootstrap, prefix, workdir
        self.env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix,
                    "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), os.environ.get("PYTHONPATH", "")])}
        self.log = open(workdir / "processes.log", "ab")
        self.procs: list[subprocess.Popen] = []

    def spawn(self, *args: str, notes_file: Path | None = None) -> subprocess.Popen:
        env = {**self.env, **({NOTES: str(notes_file)} if notes_file else {})}
        proc = subprocess.Popen([sys.executable, "-m", "scheduler", *args], cwd=REPO, env=env,
                                stdout=self.log, stderr=subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def worker(self, notes_file: Path, session_ms: int) -> subprocess.Popen:
        return self.spawn("worker", "--tenant", TENANT, "--handler", "leases:hold", "--session-timeout-ms",
                          str(session_ms), notes_file=notes_file)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


def cost(run: Run, client: SchedulerClient, lease_ms: int, window: float, session_ms: int) -> dict:
    topology = Topology.load()
    topics = [topology.topic_name(name, run.prefix) for name in COUNTED]
    file = run.workdir / "cost.jsonl"
    worker = run.worker(file, session_ms)
    client.create(TENANT, make_spec("once", at(8), payload=str(window + 30).encode(), lease_ms=lease_ms),
                  schedule_id="held")
    wait_for(lambda: notes(file, "held"), 120, "the held occurrence to start")
    time.sleep(3)  # past STARTED and its first turn
    before = end_offsets(run.bootstrap, topics)
    time.sleep(window)
    after = end_offsets(run.bootstrap, topics)
    worker.send_signal(signal.SIGTERM)
    worker.wait(60)
    per_min = {name: (after[t] - before[t]) * 60 / window for name, t in zip(COUNTED, topics, strict=True)}
    return {"lease_ms": lease_ms, "window_s": window, "per_min": per_min,
            "heartbeats_per_min": 60 / interval_s(lease_ms)}


def death_to_retry(run: Run, client: SchedulerClient, lease_ms: int, rounds: int,
                   session_ms: int) -> list[tuple[float, int]]:
    found = []
    for n in range(rounds):
        file = run.workdir / f"death{n}.jsonl"
        workers = {w.pid: w for w in (run.worker(file, session_ms), run.worker(file, session_ms))}
        sid = f"victim{n}"
        client.create(TENANT, make_spec("once", at(10), payload=b"60", lease_ms=lease_ms, retry_backoff_ms=100),
                      schedule_id=sid)
        wait_for(lambda file=file, sid=sid: notes(file, sid), 120, "the first attempt")
        first = notes(file, sid)[0]
        time.sleep(1.5)
        workers[first["pid"]].kill()
        killed = time.time()
        wait_for(lambda file=file, sid=sid: len(notes(file, sid)) >= 2, 120, "the retry")
        retry = notes(file, sid)[1]
        found.append((retry["at"] - killed, retry["attempt"]))
        for worker in workers.values():  # SIGTERM: the retry is cut short and recorded, nothing is left over
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(60)
    return found


def report(costs: dict, deaths: list[tuple[float, int]], session_ms: int) -> str:
    lease_ms = costs["lease_ms"]
    total = sum(costs["per_min"].values())
    beats = costs["heartbeats_per_min"]
    rows = "\n".join(f"| `{name}` | {value:.1f} | {value / beats:.2f} |" for name, value in costs["per_min"].items())
    at_default = total / beats * 60 / interval_s(30_000)
    return f"""# Leases: heartbeat cost and death-to-retry

`python bench/leases.py --lease-ms {lease_ms} --window {costs['window_s']:g} --rounds {len(deaths)}`, one run
({datetime.now(UTC):%Y-%m-%d}, 2 cores shared with other work).

## Heartbeat cost per running occurrence

Lease {lease_ms} ms: the worker heartbeats every lease/3 = {interval_s(lease_ms):.2f} s, {beats:.0f} per minute.
Records added per minute while one occurrence runs (end-offset deltas over {costs['window_s']:g} s, so
transaction markers count: each heartbeat is its own worker transaction):

| topic | records / min | per heartbeat |
|---|---|---|
{rows}
| **total** | **{total:.1f}** | **{total / beats:.2f}** |

At the default lease (30 s, a heartbeat every 10 s) that is about **{at_default:.0f} records per minute**
per running occurrence. End offsets count every record and transaction marker: per heartbeat the worker's HEARTBEAT and its
marker, the engine's status record and lease-index move (a tombstone and a put) and, on this idle
engine that runs one turn per heartbeat, its markers on those two changelog partitions (a busy engine
shares its markers among everything a turn writes: about {total / beats - 2:.0f} records per heartbeat
there). Not included: broker replication (factor 1 here), bytes.

## Worker death to retry

Two workers, session timeout {session_ms} ms (below the lease: the survivor owns the dead worker's
partitions by the time the lease expires); the worker running the occurrence is SIGKILLed 1.5 s into
it; time from the kill to the retry's handler start, per round (attempt number run):
{', '.join(f'{d:.2f} s (attempt {a})' for d, a in deaths)}, median **{statistics.median(d for d, _ in deaths):.2f} s**
(lease {lease_ms / 1000:g} s).

Two paths lead there. Attempt 1 again: the group gave the dead worker's partition to the survivor
(session timeout, then a rebalance) before the lease expired, the survivor read the uncommitted
record again and its STARTED took the lease over (the dead token is fenced). Attempt 2: the lease
expired first, the scheduler recorded LOST and dispatched the retry, which the survivor reads once
it owns the partition (the retry is keyed by schedule_id, like the first attempt). So in
consumer-group mode the wait is at least the group's failure detection (session timeout + rebalance),
and with a session timeout below the lease it is at most the lease left since the last heartbeat +
a turn + the backoff: the lease decides which attempt runs, and it is what frees an occurrence held
by a worker that is alive but stuck (SIGSTOP in `tests/integration/test_leases.py`), which no group
timeout notices.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"))
    parser.add_argument("--lease-ms", type=int, default=3000)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--session-timeout-ms", type=int, default=1500)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="lease-bench-"))
    broker = None
    if not args.bootstrap:
        broker = LocalBroker(workdir / "kafka", port=free_port(), controller_port=free_port())
        args.bootstrap = broker.start()
    prefix = f"lb{int(time.time()) % 100000}"
    ensure_topics(args.bootstrap, Topology.load(), prefix, tenants=[TENANT])
    run = Run(args.bootstrap, prefix, workdir)
    try:
        run.spawn("run", "--instance-id", "lease-bench", "--open-tenants", "--state-dir", str(workdir / "state"),
                  "--horizon", "5")
        with SchedulerClient(args.bootstrap, prefix, timeout_s=60) as client:
            costs = cost(run, client, args.lease_ms, args.window, args.session_timeout_ms)
            deaths = death_to_retry(run, client, args.lease_ms, args.rounds, args.session_timeout_ms)
        text = report(costs, deaths, args.session_timeout_ms)
        (REPO / "bench" / "results").mkdir(exist_ok=True)
        (REPO / "bench" / "results" / "leases.md").write_text(text)
        print(text)
    finally:
        run.stop_all()
        delete_prefixed_topics(args.bootstrap, prefix)
        if broker is not None:
            broker.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
