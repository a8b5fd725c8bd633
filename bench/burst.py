"""The top-of-the-hour burst, shared by `bench/peak.py` (strict) and `bench/flex.py` (flexible window).

One run: a broker (ours, or $KAFKA_BOOTSTRAP_SERVERS), a fresh topic prefix, one `scheduler run`
child process, N one-shot schedules due at the same instant T (one large tenant, many small ones),
a `read_committed` reader in its own process that stamps each occurrence when it becomes visible,
and the raw transactional ceiling produced to the same topics in the same run. T is chosen after
measuring the engine's create rate, so that everything is accepted (and, with the horizon passed to
the engine, materialized) before T.
"""
from __future__ import annotations

import argparse
import itertools
import math
import multiprocessing as mp
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter, defaultdict
from queue import Empty
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

import bystanders as around
from children import detach, interruptible, stop_child, stop_group, uninterrupted
from visibility import VisibleAt, probe
from idle_states import IDLE_TENANT, write_idle_states
from scheduler.kafka.admin import delete_prefixed_topics, ensure_topics
from scheduler.broker.local import LocalBroker, free_port
from scheduler.control.bulk import CreateRequest
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.wire.codec import Codec
from scheduler.engine.config import PRODUCER_BATCHING, EngineConfig
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.timing.jitter import available_at
from scheduler.timing.occurrence_id import occurrence_id
from scheduler.wire.topology import Topology

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results"
TOPOLOGY = Topology.load()
PRIORITY = "HIGH"
PAYLOAD = b'{"job": "bench", "n": 0}'
LARGE = "big"
CALIBRATION_TENANT = "calib"
TXN_RECORDS = EngineConfig.dispatch_budget  # the engine's default: one transaction per loop turn at full load
# The header of each record the reader writes: seen_ms, kafka timestamp, topic index, partition, offset,
# value length.
_FRAME = struct.Struct(">qqHHqI")
PROBE_S = 0.1  # the visibility probe's interval (bench/visibility.py)


# -- small helpers ----------------------------------------------------------------


def rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def progress(label: str, done: int, total: int, extra: str = "") -> None:
    """A plain stderr bar: no dependency, readable in a log as the last line written."""
    width = 30
    filled = int(width * done / total) if total else width
    sys.stderr.write(f"\r{label:<10} [{'#' * filled}{'.' * (width - filled)}] {done:>9,}/{total:,} {extra}\x1b[K")
    sys.stderr.flush()


def end_progress() -> None:
    sys.stderr.write("\n")


def percentile(ordered: list[int], q: float) -> int:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0


def owners(count: int, tenants: int, large_share: float) -> list[str]:
    """Schedule n belongs to the large tenant, or round-robin to one of the small ones."""
    small = [f"s{i:03d}" for i in range(tenants)]
    large_count = int(count * large_share) if tenants else count
    result = []
    for n in range(count):
        result.append(LARGE if n < large_count else small[(n - large_count) % len(small)])
    return result


def occurrence_topics(prefix: str, tenants: list[str]) -> list[str]:
    return [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=p)
            for t in tenants for p in TOPOLOGY.priorities]


# -- the reader and the ceiling, each in its own process ---------------------------------


def read_occurrences(bootstrap: str, topics: list[str], out_path: str, counter: Any, stop: Any) -> None:
    """Append every committed record with the wall time it was received; decoding waits until later. In
    its own process group, so a terminal's Ctrl-C reaches the bench alone, which stops it; it also stops by
    itself should the bench die without doing so."""
    parent = detach()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-reader-{uuid.uuid4()}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "fetch.wait.max.ms": 20, "log_level": 3})
    metadata = consumer.list_topics(timeout=30).topics
    index = {name: i for i, name in enumerate(topics)}
    consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in metadata[t].partitions])
    pack = _FRAME.pack
    with open(out_path, "wb") as out:
        while not stop.is_set() and os.getppid() == parent:
            messages = consumer.consume(20_000, timeout=0.05)
            seen = time.time_ns() // 1_000_000
            chunks = []
            for msg in messages:
                if msg.error() is not None:
                    continue
                value = msg.value()
                chunks.append(pack(seen, msg.timestamp()[1], index[msg.topic()], msg.partition(), msg.offset(),
                                   len(value)))
                chunks.append(value)
            if chunks:
                out.write(b"".join(chunks))
                with counter.get_lock():
                    counter.value += len(chunks) // 2
    consumer.close()


def produce_ceiling(bootstrap: str, prefix: str, plan: list[tuple[str, int]], due_ms: int, window_ms: int,
                    interleaved: bool, result: Any) -> None:
    """The same number of same-size occurrence records, produced transactionally as fast as possible.

    Producer settings are those of `SchedulerProcess` (scheduler/engine/runtime.py); records are encoded
    before the clock starts, since the engine also encodes them ahead of time (at materialization).
    In tenant order a transaction touches few partitions; `interleaved` takes the tenants in turn, as
    the engine's fair dispatch does, so each transaction touches every tenant's partitions."""
    detach()
    codec = Codec.default()
    scheduled_for = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc)
    per_tenant: list[list[tuple[str, bytes, bytes]]] = []
    n = 0
    for tenant, count in plan:
        records: list[tuple[str, bytes, bytes]] = []
        per_tenant.append(records)
        topic = TOPOLOGY.topic_name("occurrences", prefix, tenant=tenant, priority=PRIORITY.lower())
        for _ in range(count):
            sid = f"ceil-{n:07d}"
            oid = occurrence_id(sid, 1, scheduled_for)
            avail = available_at(oid, scheduled_for, timedelta(milliseconds=window_ms))
            body = codec.encode("Occurrence", {
                "occurrence_id": oid, "schedule_id": sid, "tenant": tenant, "schedule_version": 1,
                "scheduled_for_ms": due_ms, "available_at_ms": int(avail.timestamp() * 1000),
                "priority": PRIORITY, "payload": PAYLOAD, "attempt": 1, "dst_rule": None, "catch_up": False})
            records.append((topic, sid.encode(), body))
            n += 1
    records = ([r for turn in itertools.zip_longest(*per_tenant) for r in turn if r is not None] if interleaved
               else [r for tenant_records in per_tenant for r in tenant_records])
    producer = Producer({
        "bootstrap.servers": bootstrap, **PRODUCER_PARTITIONER_CONF,
        "transactional.id": f"{prefix}.ceiling.{uuid.uuid4().hex[:8]}",
        "transaction.timeout.ms": EngineConfig.transaction_timeout_ms, **PRODUCER_BATCHING, "log_level": 3,
    })
    producer.init_transactions(30)
    produce = producer.produce
    started = time.perf_counter()
    commits = []
    redone = 0
    first = 0
    while first < len(records):
        producer.begin_transaction()
        for topic, key, value in records[first:first + TXN_RECORDS]:
            produce(topic, value, key)
        producer.poll(0)
        producer.flush(60)
        try:
            producer.commit_transaction()
        except KafkaException as exc:
            # Seen right after the engine's burst: a record stuck until the transaction timed out. The
            # batch is redone and counted, and the time it cost stays in the measurement.
            if not exc.args[0].txn_requires_abort() or redone == 3:
                raise
            producer.abort_transaction()
            redone += 1
            continue
        commits.append(time.perf_counter() - started)
        first += TXN_RECORDS
    producer.flush(10)
    result.put({"records": len(records), "seconds": time.perf_counter() - started, "commits": commits,
                "redone": redone, "value_bytes": sum(len(r[2]) for r in records) / max(1, len(records))})


def warm_transactions(bootstrap: str) -> None:
    """A fresh broker creates its transaction state topic (50 partitions) for the first transactional producer;
    on the loaded 2-core machine that can outlast the engine's 30 s `init_transactions`, so wait for it here."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"bench-warm-{uuid.uuid4().hex[:8]}",
                         "log_level": 3})
    producer.init_transactions(180)


def wait_result(queue: Any, child: Any, what: str) -> Any:
    """The child's result, or an error as soon as it dies without one (a failed transaction, say)."""
    while True:
        try:
            return queue.get(timeout=1.0)
        except Empty:
            if not child.is_alive():
                raise RuntimeError(f"{what} exited ({child.exitcode}) without a result") from None


# -- the run --------------------------------------------------------------------------------


@dataclass
class BurstConfig:
    name: str
    count: int
    tenants: int
    large_share: float
    window_ms: int
    bootstrap: str | None
    lead_s: float | None
    margin_s: float
    profile: bool
    extra_engine_args: list[str] = field(default_factory=list)
    idle: int = 0                # schedules due beyond the horizon, loaded before the burst
    preload_idle: bool = False   # the idle set written into the changelog before the engine starts (idle_states.py)
    bystanders_per_s: int = 0    # ordinary one-shots due in each second around T (bench/bystanders.py)
    measure_state: bool = False  # state bytes per schedule and restore time from the changelog


@dataclass
class BurstResult:
    report: Path
    summary: dict[str, Any]


@dataclass
class Arrival:
    occurrence_id: str
    tenant: str
    scheduled_for_ms: int
    available_at_ms: int
    timestamp_ms: int
    seen_ms: int      # the reader received it
    visible_ms: int   # the broker showed it readable (bench/visibility.py), or seen_ms if earlier or unknown
    probed: bool = False  # the probe saw it become visible


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


def decode_arrivals(path: Path, topics: list[str],
                    visible: VisibleAt | None = None) -> tuple[list[Arrival], Counter[str]]:
    codec = Codec.default()
    arrivals = []
    per_topic: Counter[str] = Counter()
    data = path.read_bytes()
    pos = 0
    size = _FRAME.size
    while pos < len(data):
        seen, ts, topic_index, partition, offset, length = _FRAME.unpack_from(data, pos)
        pos += size
        record = codec.decode("Occurrence", data[pos:pos + length])
        pos += length
        per_topic[topics[topic_index]] += 1
        at = visible.at(topic_index, partition, offset) if visible is not None else None
        arrivals.append(Arrival(record["occurrence_id"], record["tenant"], record["scheduled_for_ms"],
                                record["available_at_ms"], ts, seen, seen if at is None else min(at, seen),
                                at is not None))
    return arrivals, per_topic


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


def run(config: BurstConfig) -> BurstResult:
    """One run; Ctrl-C or SIGTERM at any point stops what it started (bench/children.py)."""
    with interruptible():
        return _run(config)


def _run(config: BurstConfig) -> BurstResult:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{config.name}-"))
    broker = None
    bootstrap = config.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    engine = None
    profiler = None
    reader = None
    stop = None
    children: list[Any] = []  # multiprocessing children besides the reader (the ceilings)
    prefix: str | None = None
    try:
        if not bootstrap:
            broker = LocalBroker(workdir / "kafka", port=free_port(), controller_port=free_port())
            print(f"starting a local broker in {workdir / 'kafka'}", file=sys.stderr)
            bootstrap = broker.start()
        prefix = f"{config.name}{uuid.uuid4().hex[:6]}"
        schedule_owner = owners(config.count, config.tenants, config.large_share)
        tenants = list(dict.fromkeys([LARGE, *sorted(set(schedule_owner))]))
        started = time.monotonic()
        ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=[*tenants, CALIBRATION_TENANT, IDLE_TENANT],
                      timeout=120)
        print(f"topics for {len(tenants)} tenants created in {time.monotonic() - started:.1f}s "
              f"(prefix {prefix})", file=sys.stderr)
        # Until T is known, the horizon must already cover it: the lead is not known yet, so be generous.
        horizon_s = max(3600.0, (config.lead_s or 0) + config.window_ms / 1000 + 600)
        metrics_port = free_port()
        engine_args = ["--horizon", str(horizon_s), "--metrics-port", str(metrics_port), *config.extra_engine_args]
        warm_transactions(bootstrap)
        preload_s = start_restore_s = None
        far = (math.ceil(time.time()) + 60 * 86400) * 1000
        if config.idle and config.preload_idle:
            preload_s = write_idle_states(bootstrap, TOPOLOGY.topic_name("schedules", prefix), config.idle,
                                          TOPOLOGY.schedule_partitions, far)
            print(f"{config.idle:,} idle states written in {preload_s:.0f}s", file=sys.stderr)
        engine = Engine(bootstrap, prefix, workdir, engine_args)
        engine.wait_assigned()
        if preload_s is not None:
            start_restore_s = engine.wait_dispatching(TOPOLOGY.schedule_partitions, 300 + config.idle / 10_000)

        ctx = mp.get_context("spawn")
        topics = occurrence_topics(prefix, tenants)
        counter = ctx.Value("q", 0)
        stop = ctx.Event()
        arrivals_path = workdir / "arrivals.bin"
        reader = ctx.Process(target=read_occurrences, args=(bootstrap, topics, str(arrivals_path), counter, stop),
                             daemon=True)
        reader.start()

        with SchedulerClient(bootstrap, prefix, timeout_s=600) as client:
            idle_rate = None
            if config.idle and not config.preload_idle:
                idle_s = create_all(client, [(f"idle-{n:08d}", IDLE_TENANT) for n in range(config.idle)], far, 0,
                                    "idle")
                idle_rate = config.idle / idle_s
            lead_s = config.lead_s
            calibration_rate = None
            calibrated = 0
            if lead_s is None:
                # A warm-up round, then a measured one; both stay as idle schedules (due beyond the horizon).
                far = (math.ceil(time.time()) + 30 * 86400) * 1000
                k = min(10_000, max(2000, config.count // 20))
                calibration = [(f"cal-{n:06d}", CALIBRATION_TENANT) for n in range(k + k // 4)]
                create_all(client, calibration[:k // 4], far, 0, "warm-up")
                calibration_rate = k / create_all(client, calibration[k // 4:], far, 0, "calibrate")
                calibrated = len(calibration)
                lead_s = config.count / calibration_rate * 1.3 + config.margin_s
            due_ms = (math.ceil(time.time() + lead_s)) * 1000
            print(f"T = {rfc3339(due_ms)} (in {lead_s:.0f}s"
                  + (f", calibrated create rate {calibration_rate:,.0f}/s)" if calibration_rate else ")"),
                  file=sys.stderr)
            plan = [(f"{config.name}-{n:07d}", tenant) for n, tenant in enumerate(schedule_owner)]
            # Bystanders first: each is accepted well before it is due, whatever the burst's loading takes.
            bystanders = around.create(client, tenants, due_ms, config.bystanders_per_s, PRIORITY, PAYLOAD)
            load_s = create_all(client, plan, due_ms, config.window_ms, "create")
        loaded_ms = now_ms()
        visible_path = workdir / "visible.bin"
        watched = [TOPOLOGY.topic_name("occurrences", prefix, tenant=t, priority=PRIORITY.lower()) for t in tenants]
        prober = ctx.Process(target=probe, args=(bootstrap, topics, watched, str(visible_path), stop, PROBE_S),
                             daemon=True)
        children.append(prober)
        prober.start()
        if loaded_ms > due_ms - 1000:
            raise RuntimeError(f"loading ended {loaded_ms - due_ms} ms after T-1s: pass a larger --lead")
        scheduled_for = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc)
        window = timedelta(milliseconds=config.window_ms)
        expected: dict[str, tuple[str, int]] = {}
        for sid, tenant in plan:
            oid = occurrence_id(sid, 1, scheduled_for)
            expected[oid] = (tenant, int(available_at(oid, scheduled_for, window).timestamp() * 1000))

        span_s = config.window_ms / 1000
        metrics_before = scrape(metrics_port)
        deadline = due_ms / 1000 + span_s + max(120.0, config.count / 2000)
        while counter.value < config.count + len(bystanders) and time.time() < deadline:
            until_t = due_ms / 1000 - time.time()
            if config.profile and profiler is None:
                # From the end of loading until dispatch ends: the stage is prepared and produced before T.
                duration = int(max(5, until_t + span_s + 5 + config.count / 10_000))
                profiler = subprocess.Popen(
                    [str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(engine.proc.pid),
                     "--rate", "50", "--format", "raw", "--duration", str(duration),
                     "-o", str(workdir / "profile.txt")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            note = f"T{'-' if until_t > 0 else '+'}{abs(until_t):.1f}s"
            progress("dispatch", min(counter.value, config.count), config.count, note)
            time.sleep(0.2)
        time.sleep(2.0)  # anything beyond the expected set (duplicates, strays) still gets a chance to show
        progress("dispatch", min(counter.value, config.count), config.count, "done")
        end_progress()
        stop.set()
        reader.join(30)
        prober.join(30)
        metrics_after = scrape(metrics_port)
        engine_metrics = {k: metrics_after[k] - metrics_before.get(k, 0.0) for k in metrics_after}
        time.sleep(5.0)  # nothing is due now: what does the engine cost at rest after the burst?
        engine_metrics["idle_cpu_share"] = (scrape(metrics_port).get("process_cpu_seconds_total", 0.0)
                                            - metrics_after.get("process_cpu_seconds_total", 0.0)) / 5.0

        print("ceiling: producing the same records transactionally ...", file=sys.stderr)
        ceiling_plan = list(Counter(schedule_owner).items())
        ceilings = []
        for interleaved in (False, True):
            queue = ctx.Queue()
            ceiling = ctx.Process(target=produce_ceiling, args=(bootstrap, prefix, ceiling_plan, due_ms,
                                                                config.window_ms, interleaved, queue))
            children.append(ceiling)
            ceiling.start()
            ceilings.append(wait_result(queue, ceiling, "the ceiling"))
            ceiling.join(30)
        ceiling_result, interleaved_ceiling = ceilings
        if profiler is not None:
            profiler.wait(600)

        stage = staged_burst(engine.log_path.read_text(errors="replace"), due_ms)  # before a restart for state
        state = None
        if config.measure_state:
            print("state: measuring bytes, then restoring from the changelog ...", file=sys.stderr)
            state, engine = measure_state(bootstrap, prefix, workdir, engine, engine_args, broker is not None,
                                          config.count + config.idle + calibrated)
            state["create_rate"] = idle_rate or config.count / load_s
        arrivals, per_topic = decode_arrivals(arrivals_path, topics, VisibleAt(visible_path))
        summary: dict[str, Any] = {"idle": config.idle, "idle_create_rate": idle_rate, "state": state,
                                   "stage": stage, "preload_s": preload_s, "start_restore_s": start_restore_s}
        report = analyse(config, prefix, due_ms, loaded_ms, load_s, calibration_rate, expected, bystanders, arrivals,
                         per_topic, ceiling_result, interleaved_ceiling, workdir / "profile.txt" if config.profile else None,
                         engine_args, engine_metrics, summary)
        return BurstResult(report, summary)
    except Exception:
        if engine is not None:
            print(f"the run failed; the engine's log ends:\n{engine.tail()}", file=sys.stderr)
        raise
    finally:
        with uninterrupted():
            if stop is not None:
                stop.set()
            for child in ([reader] if reader is not None else []) + children:
                stop_child(child, 30)
            if profiler is not None:
                stop_group(profiler, 10)
            if engine is not None:
                engine.stop()
            if broker is not None:
                broker.stop()
            elif prefix is not None and bootstrap and not os.environ.get("BENCH_KEEP_WORKDIR"):
                delete_prefixed_topics(bootstrap, prefix, timeout=120)
            if os.environ.get("BENCH_KEEP_WORKDIR"):
                print(f"kept {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


# -- analysis and report ------------------------------------------------------------


def analyse(config: BurstConfig, prefix: str, due_ms: int, loaded_ms: int, load_s: float,
            calibration_rate: float | None, expected: dict[str, tuple[str, int]],
            bystanders: dict[str, tuple[str, int]], arrivals: list[Arrival],
            per_topic: Counter[str], ceiling: dict[str, Any], interleaved_ceiling: dict[str, Any], profile_path: Path | None,
            engine_args: list[str], engine_metrics: dict[str, float], summary: dict[str, Any]) -> Path:
    bystander_arrivals = [a for a in arrivals if a.occurrence_id in bystanders]
    arrivals = [a for a in arrivals if a.occurrence_id not in bystanders]
    first_seen: dict[str, Arrival] = {}
    duplicates = 0
    for a in arrivals:
        if a.occurrence_id in first_seen:
            duplicates += 1
        else:
            first_seen[a.occurrence_id] = a
    missing = expected.keys() - first_seen.keys()
    unexpected = first_seen.keys() - expected.keys()
    wrong_tenant = sum(1 for oid, a in first_seen.items() if oid in expected and expected[oid][0] != a.tenant)
    ok = [a for oid, a in first_seen.items() if oid in expected]
    early = sum(1 for a in ok if a.timestamp_ms < expected[a.occurrence_id][1])
    # Lag from the instant the occurrence was due: scheduled_for for strict, available_at for flexible.
    visible_lag = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok)
    read_lag = sorted(a.seen_ms - expected[a.occurrence_id][1] for a in ok)
    enq_lag = sorted(a.timestamp_ms - expected[a.occurrence_id][1] for a in ok)
    large = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok if a.tenant == LARGE)
    small = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok if a.tenant != LARGE)
    last_seen = max((a.visible_ms for a in ok), default=due_ms)
    dispatch_s = max(0.001, (last_seen - due_ms) / 1000)
    engine_rate = len(ok) / dispatch_s
    ceiling_rate = ceiling["records"] / ceiling["seconds"]
    interleaved_rate = interleaved_ceiling["records"] / interleaved_ceiling["seconds"]
    by = around.summary(due_ms, around.lags(bystanders, {a.occurrence_id: a.visible_ms
                                                           for a in reversed(bystander_arrivals)}))
    by_read = around.summary(due_ms, around.lags(bystanders, {a.occurrence_id: a.seen_ms
                                                              for a in reversed(bystander_arrivals)}))
    stage = summary.get("stage")
    work_rate = stage["work_rate"] if stage and stage.get("work_rate") else None
    summary.update(bystanders_p99_ms=by["p99"], bystanders_max_ms=by["max"], bystanders=by["count"],
                   read_p99_ms=percentile(read_lag, 0.99), bystanders_read_p99_ms=by_read["p99"],
                   work_rate=work_rate, work_ratio=work_rate / ceiling_rate if work_rate else None,
                   staged_share=stage["staged"] / max(1, len(expected)) if stage else 0.0,
                   visible_ratio=engine_rate / ceiling_rate)
    summary.update(count=len(expected), arrived=len(ok), missing=len(missing), unexpected=len(unexpected),
                   p50_ms=percentile(visible_lag, 0.5), p99_ms=percentile(visible_lag, 0.99),
                   max_ms=visible_lag[-1] if visible_lag else 0, engine_rate=engine_rate, ceiling_rate=ceiling_rate)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = (f"scale-{config.count}-idle{config.idle}" if config.measure_state
            else f"{config.name}-{config.count}")
    try:
        plots = plot(stem, config, due_ms, ok, expected)
    except ImportError:  # the bench extras are not installed: the report is complete without its plots
        print("no plots: install the bench extras (pip install -e '.[dev,bench]')", file=sys.stderr)
        plots = []
    lines = [
        f"# bench/{config.name}: {config.count:,} one-shot schedules due at the same instant",
        "",
        f"Run at {rfc3339(now_ms())} on {os.cpu_count()} cores (broker, engine, reader and loader on the same machine).",
        "",
        "Command: `" + " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]) + "`",
        "",
        f"- schedules: {config.count:,}, tenant `{LARGE}` holds {sum(1 for v in expected.values() if v[0] == LARGE):,}, "
        f"{config.tenants} small tenants share the rest; priority {PRIORITY}; "
        f"flexible window {config.window_ms} ms; prefix `{prefix}`",
        f"- engine: one `scheduler run {' '.join(engine_args)}` process",
        f"- creates: {config.count:,} accepted in {load_s:.1f}s ({config.count / load_s:,.0f}/s end to end)"
        + (f"; calibrated create rate beforehand {calibration_rate:,.0f}/s" if calibration_rate else ""),
        f"- T = {rfc3339(due_ms)}; loading finished {(due_ms - loaded_ms) / 1000:.1f}s before T",
        f"- idle schedules (due in 60 days, beyond the horizon) loaded first: {config.idle:,}"
        + (f" at {summary['idle_create_rate']:,.0f} creates/s" if summary.get("idle_create_rate") else "")
        + (f", written into the schedules changelog in {summary['preload_s']:.0f}s before the engine started "
           f"(bench/idle_states.py: no commands, no admission), which restored them in "
           f"{summary['start_restore_s']:.1f}s" if summary.get("preload_s") is not None else ""),
        "",
        "## Completeness",
        "",
        f"- expected occurrence ids: {len(expected):,}; arrived: {len(ok):,}; missing: {len(missing):,}; "
        f"unexpected ids: {len(unexpected):,}; duplicates: {duplicates:,}; in the wrong tenant: {wrong_tenant:,}",
        f"- visible time from the broker's last stable offsets (bench/visibility.py) for "
        f"{sum(1 for a in ok if a.probed):,} of {len(ok):,} (the rest: the reader's receipt)",
        f"- enqueued before their due instant (`kafka timestamp < {'available_at' if config.window_ms else 'scheduled_for'}`): {early:,}",
        f"- records per topic: {len(per_topic)} topics, min {min(per_topic.values(), default=0):,}, "
        f"max {max(per_topic.values(), default=0):,}",
        "",
        "## Lag (ms), `visible_at - " + ("available_at" if config.window_ms else "scheduled_for") + "`",
        "",
        "`visible_at` is when the broker first answered that the record's partition's last stable offset",
        f"had passed it (bench/visibility.py: every {PROBE_S * 1000:.0f} ms, so at most that plus a round trip late),",
        "or when the reader received it if that was earlier: the moment any `read_committed` consumer could",
        "read it, commit included. `read` is when the one `read_committed` reader (its own process, reading",
        "every topic of the run on the same cores) received it; `enqueued` is the record's Kafka timestamp",
        "(set when the engine produced it; a staged record carries the instant).",
        "",
        "| measure | count | p50 | p95 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, values in (("visible (all)", visible_lag), ("read by the one reader (all)", read_lag),
                          ("enqueued (all)", enq_lag),
                          (f"visible, large tenant `{LARGE}`", large), ("visible, small tenants", small)):
        lines.append(f"| {label} | {len(values):,} | {percentile(values, 0.5):,} | {percentile(values, 0.95):,} | "
                     f"{percentile(values, 0.99):,} | {values[-1] if values else 0:,} |")
    first_visible: dict[str, int] = {}
    first_read: dict[str, int] = {}
    for a in bystander_arrivals:
        first_visible.setdefault(a.occurrence_id, a.visible_ms)
        first_read.setdefault(a.occurrence_id, a.seen_ms)
    stage = summary.get("stage")
    lines += around.section(due_ms, bystanders, first_visible, visible_lag, stage.get("window_ms") if stage else None,
                            first_read, read_lag)
    p99 = percentile(visible_lag, 0.99)
    ratio = engine_rate / ceiling_rate
    lines += [
        "",
        "## Dispatch rate and the transactional ceiling",
        "",
        f"- engine: {len(ok):,} occurrences visible {dispatch_s:.2f}s after T: **{engine_rate:,.0f}/s**",
        f"- ceiling (one process, same producer settings as the engine, {TXN_RECORDS:,} records per transaction, "
        f"same topics, {ceiling['value_bytes']:.0f}-byte values): {ceiling['records']:,} in {ceiling['seconds']:.2f}s: "
        f"**{ceiling_rate:,.0f}/s**" + (f" ({ceiling['redone']} transaction(s) timed out and were redone)"
                                         if ceiling.get("redone") else ""),
        f"- ratio engine / ceiling: **{ratio:.2f}**" + (" (not a capacity figure here: a flexible window spreads "
                                                        "the dispatch over the window by design)"
                                                        if config.window_ms else ""),
        f"- the same ceiling with the tenants interleaved as the engine's fair dispatch sends them (each "
        f"transaction touches every tenant's partitions): {interleaved_rate:,.0f}/s; engine / that: "
        f"{engine_rate / interleaved_rate:.2f}",
        "- note: per occurrence the engine also writes a timeline-changelog tombstone in the same transaction,",
        "  so it moves twice the records of the ceiling.",
        "",
    ]
    lines += engine_metrics_section(engine_metrics)
    stage = summary.get("stage")
    lines += ["## Staging (scheduler/engine/staging.py), from the engine's log", ""]
    if stage:
        lines += [f"- staging lead: began {stage['lead_s']:.1f}s before T; {stage['staged']:,} occurrences prepared "
                  f"in memory over {stage['seconds']:.1f}s of the lead ({stage['prepare_s']:.2f}s of work; no "
                  "transaction open, nothing held back)",
                  f"- produce window: its transaction began **{stage['window_ms']:,} ms before T**; producing took "
                  f"{stage['produce_s']:.2f}s of work (in slices between turns; delivery waited for at the instant if "
                  f"not done by then); committed in {stage['commit_s']:.3f}s, visible "
                  f"{stage['visible_ms']:,} ms after T; readers of its partitions were held {stage['open_ms']:,} ms",
                  f"- **the engine's own per-occurrence rate**: {stage['staged']:,} / (prepare {stage['prepare_s']:.2f}s "
                  f"+ produce {stage['produce_s']:.2f}s + commit {stage['commit_s']:.3f}s) = **{stage['work_rate']:,.0f}/s**, "
                  f"**{stage['work_rate'] / ceiling_rate:.2f}** of the ceiling above (both timed in-process with "
                  "perf_counter around the work: the ceiling from its first produce to its last commit). "
                  f"{stage['staged'] / max(1, len(expected)):.0%} of the burst was staged; the rest went the ordinary way after T",
                  ""]
    else:
        lines += ["- no stage for this burst: all of it went the ordinary way after T", ""]
    if not config.window_ms:
        small_ok = percentile(small, 0.99) <= max(percentile(large, 0.99), 1)
        lines += [
            "## Targets",
            "",
            f"- p99 <= 5 s: **{'met' if p99 <= 5000 else 'NOT met'}** ({p99:,} ms)",
            f"- every occurrence present, none else: **{'met' if not missing and not unexpected else 'NOT met'}**",
            f"- small tenants' p99 no worse than the large tenant's: **{'met' if small_ok else 'NOT met'}**",
            f"- dispatch rate >= 0.5 x ceiling: **{'met' if ratio >= 0.5 else 'NOT met'}** ({ratio:.2f})",
            "",
        ]
    else:
        lines += flex_section(due_ms, config.window_ms, ok, expected)
    lines += ["## Dispatch over time", "", "| second after T | occurrences visible |", "|---:|---:|"]
    per_second = Counter((a.visible_ms - due_ms) // 1000 for a in ok)
    shown = sorted(per_second.items())
    if len(shown) > 40:
        shown = shown[:20] + [(None, None)] + shown[-10:]
    for second, n in shown:
        lines.append("| ... | ... |" if second is None else f"| {second} | {n:,} |")
    lines += ["", "Plots (not kept in git): " + (", ".join(f"`bench/results/{p.name}`" for p in plots) or "none"), ""]
    if profile_path is not None:
        lines += profile_section(profile_path)
    path = RESULTS / f"{stem}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


_STAGING = re.compile(r"staging the burst due at (\d+) \((\d+) entries, ([\d.]+) s ahead\)")
_STAGED = re.compile(r"staged (\d+) occurrences due at (\d+) in ([\d.]+) s")
_COMMITTED = re.compile(r"committed the staged burst due at (\d+): (\d+) occurrences visible (-?\d+) ms after it; "
                        r"its transaction was open (\d+) ms; work: prepare ([\d.]+) s, produce ([\d.]+) s, "
                        r"commit ([\d.]+) s")
_PRODUCED = re.compile(r"produced the stage due at (\d+): (\d+) occurrences in ([\d.]+) s, (-?\d+) ms before it")


def staged_burst(log: str, due_ms: int) -> dict[str, float] | None:
    """What the engine logged of staging the burst due at `due_ms` (None when it was not staged): the lead,
    the preparation, the produce window and the work each phase took (scheduler/engine/stager.py)."""
    def last(pattern: re.Pattern[str], group: int) -> re.Match[str] | None:
        found = [m for m in pattern.finditer(log) if int(m.group(group)) == due_ms]
        return found[-1] if found else None

    began, staged, produced, committed = (last(_STAGING, 1), last(_STAGED, 2), last(_PRODUCED, 1),
                                          last(_COMMITTED, 1))
    if not (began and staged and produced and committed):
        return None
    count, seconds = int(committed.group(2)), float(staged.group(3))
    prepare_s, produce_s, commit_s = (float(committed.group(n)) for n in (5, 6, 7))
    open_ms = int(committed.group(4))
    return {"lead_s": float(began.group(3)), "staged": count, "seconds": seconds, "prepare_s": prepare_s,
            "produce_s": produce_s, "commit_s": commit_s, "open_ms": open_ms,
            "window_ms": open_ms - int(committed.group(3)),
            "work_rate": count / max(prepare_s + produce_s + commit_s, 0.001),
            "visible_ms": int(committed.group(3))}


def engine_metrics_section(delta: dict[str, float]) -> list[str]:
    """What the engine's /metrics says happened between the end of loading and the end of dispatch."""
    txns = delta.get("scheduler_transactions_total", 0.0)
    commits = delta.get("scheduler_transaction_commit_seconds_count", 0.0)
    lag_n = delta.get("scheduler_schedule_lag_seconds_count", 0.0)
    return [
        "## The engine's own metrics over the dispatch (scraped from `--metrics-port`)",
        "",
        f"- transactions: {txns:,.0f}; mean `commit_transaction` latency "
        f"{delta.get('scheduler_transaction_commit_seconds_sum', 0.0) / commits if commits else 0:.3f}s",
        f"- occurrences dispatched: {delta.get('scheduler_occurrences_dispatched_total', 0.0):,.0f}; "
        f"mean schedule lag (due instant to commit) "
        f"{delta.get('scheduler_schedule_lag_seconds_sum', 0.0) / lag_n if lag_n else 0:.2f}s",
        f"- of those, staged ahead and made visible by one commit at T (scheduler/engine/staging.py): "
        f"{delta.get('scheduler_staged_occurrences_total', 0.0):,.0f}; that commit took "
        f"{delta.get('scheduler_stage_commit_seconds_sum', 0.0):.3f}s. Staged records carry T as their "
        f"Kafka timestamp, so for them `enqueued` above is 0 and `seen` is the measure",
        f"- engine CPU in the 5 s after the dispatch, with nothing due: {delta.get('idle_cpu_share', 0.0):.0%} of a core",
        f"- held back by tenant rate limits: {delta.get('scheduler_tenant_held_back_total', 0.0):,.0f}; "
        f"engine RSS change over the dispatch {delta.get('process_resident_memory_bytes', 0.0) / 2**20:+,.0f} MiB",
        "",
    ]


def flex_section(due_ms: int, window_ms: int, ok: list[Arrival], expected: dict[str, tuple[str, int]]) -> list[str]:
    seconds = window_ms // 1000
    planned = Counter((expected[a.occurrence_id][1] - due_ms) // 1000 for a in ok)
    actual = Counter((a.timestamp_ms - due_ms) // 1000 for a in ok)
    counts = [actual.get(s, 0) for s in range(seconds)]
    mean = sum(counts) / max(1, len(counts))
    sd = math.sqrt(sum((c - mean) ** 2 for c in counts) / max(1, len(counts)))
    wrong_slot = sum(1 for a in ok if a.available_at_ms != expected[a.occurrence_id][1])
    late_second = sum(1 for a in ok if a.timestamp_ms - expected[a.occurrence_id][1] >= 1000)
    return [
        "## Flatness over the window",
        "",
        f"- enqueued per second over the {seconds}s window: mean {mean:,.0f}, sd {sd:,.0f} "
        f"(cv {sd / mean if mean else 0:.3f}), min {min(counts, default=0):,}, max {max(counts, default=0):,}",
        f"- the deterministic plan (`available_at` per occurrence) per second: min {min(planned.values(), default=0):,}, "
        f"max {max(planned.values(), default=0):,}",
        f"- occurrences whose record's `available_at_ms` differs from `scheduler.timing.jitter.available_at`: {wrong_slot:,}",
        f"- occurrences enqueued 1 s or more after their `available_at`: {late_second:,}",
        "",
    ]


def profile_section(path: Path, top: int = 15) -> list[str]:
    """Summarise py-spy's collapsed stacks: inclusive and self share of samples per function."""
    if not path.exists():
        return ["## Profile", "", "py-spy wrote no profile.", ""]
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] + ")"
                  for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    lines = ["## Profile of the engine during dispatch (py-spy, 50 Hz, all threads)", "",
             f"{total:,} samples. Inclusive share (the function or something it calls was on the stack):", "",
             "| function | inclusive | self |", "|---|---:|---:|"]
    for frame, n in inclusive.most_common(top * 2)[:top * 2]:
        lines.append(f"| `{frame}` | {100 * n / total:.1f}% | {100 * own.get(frame, 0) / total:.1f}% |")
    lines += ["", "Top self time:", "", "| function | self |", "|---|---:|"]
    for frame, n in own.most_common(top):
        lines.append(f"| `{frame}` | {100 * n / total:.1f}% |")
    return lines + [""]


def plot(stem: str, config: BurstConfig, due_ms: int, ok: list[Arrival],
         expected: dict[str, tuple[str, int]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    lags = defaultdict(list)
    for a in ok:
        lags[LARGE if a.tenant == LARGE else "small tenants"].append((a.visible_ms - expected[a.occurrence_id][1])
                                                                     / 1000)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, values in lags.items():
        values.sort()
        ax.plot(values, [i / len(values) for i in range(len(values))], label=label)
    ax.set_xlabel("seen_at - due instant (s)")
    ax.set_ylabel("fraction of occurrences")
    ax.set_title(f"{config.name}: lag distribution ({len(ok):,} occurrences)")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(RESULTS / f"{stem}-lag.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)

    bin_ms = 1000 if config.window_ms else 100
    seen = Counter((a.visible_ms - due_ms) // bin_ms for a in ok)
    enq = Counter((a.timestamp_ms - due_ms) // bin_ms for a in ok)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, counts in (("visible (read_committed)", seen), ("enqueued (record timestamp)", enq)):
        xs = list(range(min(counts, default=0), max(counts, default=0) + 2))
        ax.step([x * bin_ms / 1000 for x in xs], [counts[x] * 1000 / bin_ms for x in xs], where="post", label=label)
    ax.set_xlabel("seconds after T")
    ax.set_ylabel("occurrences / s")
    ax.set_title(f"{config.name}: dispatch rate per {bin_ms} ms")
    ax.grid(True, alpha=0.3)
    ax.legend()
    paths.append(RESULTS / f"{stem}-rate.png")
    fig.savefig(paths[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths


def parser(description: str, default_count: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--count", type=int, default=default_count, help="schedules due at the same instant")
    p.add_argument("--tenants", type=int, default=100, help="small tenants sharing the rest")
    p.add_argument("--large-share", type=float, default=0.8, help="fraction held by the one large tenant")
    p.add_argument("--bootstrap", help="use this broker (default $KAFKA_BOOTSTRAP_SERVERS, else start one)")
    p.add_argument("--lead", type=float, help="seconds from the start of loading to T (default: calibrated)")
    p.add_argument("--margin", type=float, default=20.0, help="seconds added to the calibrated lead")
    p.add_argument("--profile", action="store_true", help="py-spy the engine during dispatch")
    p.add_argument("--engine-arg", action="append", default=[], help="extra `scheduler run` argument (repeatable)")
    p.add_argument("--bystanders-per-s", type=int, default=0,
                   help=f"ordinary one-shots due in each second of the {around.BEFORE_S} s before T and the "
                        f"{around.AFTER_S} s after it, in the burst's tenants' topics (0: none)")
    return p
