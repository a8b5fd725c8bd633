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
import math
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import bystanders as around
from bench_engine import Engine, create_all, measure_state, scrape
from burst_children import decode_arrivals, produce_ceiling, read_occurrences, wait_result, warm_transactions
from burst_common import (
    CALIBRATION_TENANT,
    LARGE,
    PAYLOAD,
    PRIORITY,
    PROBE_S,
    TOPOLOGY,
    BurstConfig,
    BurstResult,
    end_progress,
    now_ms,
    occurrence_topics,
    owners,
    progress,
    rfc3339,
)
from burst_report import analyse, staged_burst
from children import closed_at_exit, interruptible, stop_child, stop_group, stop_step, uninterrupted
from idle_states import IDLE_TENANT, write_idle_states
from scheduler.broker.local import LocalBroker, free_port
from scheduler.control.client import SchedulerClient
from scheduler.kafka.admin import delete_prefixed_topics, ensure_topics
from scheduler.timing.jitter import available_at
from scheduler.timing.occurrence_id import occurrence_id
from visibility import VisibleAt, probe


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

        with closed_at_exit(SchedulerClient(bootstrap, prefix, timeout_s=600), "the control client") as client:
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
                with stop_step(f"process {child.name}"):
                    stop_child(child, 30)
            if profiler is not None:
                stop_group(profiler, 10)
            if engine is not None:
                with stop_step("the engine"):
                    engine.stop()
            if broker is not None:
                with stop_step("the broker"):
                    broker.stop()
            elif prefix is not None and bootstrap and not os.environ.get("BENCH_KEEP_WORKDIR"):
                delete_prefixed_topics(bootstrap, prefix, timeout=120)
            if os.environ.get("BENCH_KEEP_WORKDIR"):
                print(f"kept {workdir}", file=sys.stderr)
            else:
                shutil.rmtree(workdir, ignore_errors=True)


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
