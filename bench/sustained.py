"""The daily average, sustained: `python bench/sustained.py --rate 2315 --minutes 10 [--command-rate 20] [--steady]`.

200 million occurrences a day is 2,315 a second. `rate × period` fixed-rate schedules ("every 10s")
with evenly spread anchors fire that many a second for the run's duration, while a side thread
keeps creating and cancelling other schedules (commands mixed in). A `read_committed` reader in its
own process stamps every occurrence; the engine's /metrics is scraped every few seconds for its
memory, CPU, dispatched count and backlog. Writes `bench/results/sustained-<rate>.md` (and `.json`, read
by bench/regress.py) with lag percentiles and engine CPU per occurrence per minute, memory over time, and
a completeness check, plus PNG plots.

`--steady`: the schedules have no `end_at`, so planning never stops before the run ends (with an end,
the last two minutes plan nothing and hide the steady state); the first `--warmup` minutes are left out
of the summary, and the RSS of the last half of the rest is compared with the half before it. The
completeness check covers the fires up to the run's end.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

from bench_engine import Engine, scrape
from burst_children import decode_arrivals, read_occurrences
from burst_common import (
    CALIBRATION_TENANT,
    RESULTS,
    TOPOLOGY,
    end_progress,
    now_ms,
    occurrence_topics,
    owners,
    percentile,
    progress,
    rfc3339,
)
from scheduler.broker.local import LocalBroker, free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.kafka.admin import ensure_topics
from scheduler.timing.occurrence_id import occurrence_id

PERIOD_S = 10
CHURN_TENANT = "churn"


def churn(client_args: tuple[str, str], rate: float, stop: threading.Event, sent: list[int]) -> None:
    """Create a far-future one-shot and cancel the previous one, `rate` commands a second."""
    with SchedulerClient(*client_args, timeout_s=60) as client:
        far = rfc3339((math.ceil(time.time()) + 90 * 86400) * 1000)
        spec = make_spec("once", far)
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            sid = f"churn-{n:07d}"
            client.send("CREATE", sid, CHURN_TENANT, spec=spec)
            if n:
                client.send("CANCEL", f"churn-{n - 1:07d}", CHURN_TENANT)
            sent[0] += 2 if n else 1
            n += 1
            client.producer.poll(0)
            time.sleep(max(0.0, 2 / rate - (time.monotonic() - started)))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--rate", type=int, default=2315, help="occurrences per second")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--tenants", type=int, default=20)
    p.add_argument("--command-rate", type=float, default=20.0, help="create/cancel commands per second meanwhile")
    p.add_argument("--steady", action="store_true", help="schedules without end_at (see above)")
    p.add_argument("--warmup", type=float, default=1.0, help="minutes left out of the summary")
    p.add_argument("--engine-arg", action="append", default=[], help="extra `scheduler run` argument (repeatable)")
    p.add_argument("--bootstrap")
    args = p.parse_args()
    schedules = args.rate * PERIOD_S
    duration_ms = int(args.minutes * 60_000)
    workdir = Path(tempfile.mkdtemp(prefix="bench-sustained-"))
    broker = None
    bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    if not bootstrap:
        broker = LocalBroker(workdir / "kafka", port=free_port(), controller_port=free_port())
        bootstrap = broker.start()
    engine = None
    reader = None
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    try:
        prefix = f"sust{uuid.uuid4().hex[:6]}"
        schedule_owner = owners(schedules, args.tenants, 0.8)
        tenants = sorted(set(schedule_owner))
        ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=[*tenants, CHURN_TENANT, CALIBRATION_TENANT], timeout=120)
        port = free_port()
        engine = Engine(bootstrap, prefix, workdir, ["--metrics-port", str(port), *args.engine_arg])
        engine.wait_assigned()
        topics = occurrence_topics(prefix, tenants)
        counter = ctx.Value("q", 0)
        arrivals_path = workdir / "arrivals.bin"
        reader = ctx.Process(target=read_occurrences, args=(bootstrap, topics, str(arrivals_path), counter, stop),
                             daemon=True)
        reader.start()

        # Start once loading is surely done: creates run at 1,000-3,000/s on this machine.
        start_ms = (math.ceil(time.time() + schedules / 600 + 30)) * 1000
        end_ms = start_ms + duration_ms - 1
        expected: dict[str, int] = {}
        with SchedulerClient(bootstrap, prefix, timeout_s=600) as client:
            ids = []
            for n, tenant in enumerate(schedule_owner):
                anchor = start_ms + n * PERIOD_S * 1000 // schedules
                spec = make_spec("rate", f"every {PERIOD_S}s", anchor_at_ms=anchor, start_at_ms=start_ms,
                                 end_at_ms=None if args.steady else end_ms, priority="NORMAL")
                sid = f"sust-{n:07d}"
                ids.append(client.send("CREATE", sid, tenant, spec=spec))
                for fire in range(anchor, end_ms + 1, PERIOD_S * 1000):
                    expected[occurrence_id(sid, 1, datetime.fromtimestamp(fire / 1000, tz=timezone.utc))] = fire
                if n % 2000 == 0:
                    progress("create", n, schedules, "sent")
            results = client.wait(ids, timeout_s=600)
            end_progress()
        if {r["status"] for r in results.values()} != {"ACCEPTED"}:
            raise RuntimeError("some creates were rejected")
        if now_ms() > start_ms:
            raise RuntimeError("loading ended after the start instant")

        churn_stop = threading.Event()
        churn_sent = [0]
        churner = threading.Thread(target=churn, args=((bootstrap, prefix), args.command_rate, churn_stop,
                                                       churn_sent), daemon=True)
        if args.command_rate > 0:
            churner.start()
        samples = []
        deadline = end_ms / 1000 + 60
        done = (lambda: time.time() > end_ms / 1000 + 20) if args.steady else (lambda: counter.value >= len(expected))
        while not done() and time.time() < deadline:
            try:
                m = scrape(port)
                samples.append((now_ms(), m.get("process_resident_memory_bytes", 0.0),
                                m.get("scheduler_due_backlog", 0.0), m.get("scheduler_oldest_overdue_seconds", 0.0),
                                m.get("process_cpu_seconds_total", 0.0),
                                m.get("scheduler_occurrences_dispatched_total", 0.0)))
            except OSError:
                pass
            progress("sustained", min(counter.value, len(expected)), len(expected),
                     f"{(now_ms() - start_ms) / 1000:+.0f}s, RSS {samples[-1][1] / 2**20:,.0f} MiB" if samples else "")
            time.sleep(5)
        time.sleep(2)
        end_progress()
        churn_stop.set()
        if churner.is_alive():
            churner.join(30)
        stop.set()
        reader.join(30)
        arrivals, _ = decode_arrivals(arrivals_path, topics)
        report = write_report(args, schedules, start_ms, expected, arrivals, samples, churn_sent[0])
        print(report.read_text())
        return 0
    finally:
        stop.set()
        if reader is not None:
            reader.join(30)
        if engine is not None:
            engine.stop()
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


Sample = tuple[int, float, float, float, float, float]  # at_ms, RSS, backlog, oldest overdue, CPU s, dispatched


def write_report(args: argparse.Namespace, schedules: int, start_ms: int, expected: dict[str, int],
                 arrivals: list, samples: list[Sample], commands: int) -> Path:
    seen_ids: set[str] = set()
    duplicates = 0
    per_minute: dict[int, list[int]] = defaultdict(list)
    for a in arrivals:
        if a.occurrence_id in seen_ids:
            duplicates += 1
            continue
        seen_ids.add(a.occurrence_id)
        if a.occurrence_id in expected:
            per_minute[(a.scheduled_for_ms - start_ms) // 60_000].append(a.seen_ms - a.scheduled_for_ms)
    missing = len(expected.keys() - seen_ids)
    unexpected = 0 if args.steady else len(seen_ids - expected.keys())  # steady: later fires go on arriving
    cpu_us, rss_mib = per_minute_engine(start_ms, samples)
    lines = [
        f"# bench/sustained: {args.rate:,} occurrences/s for {args.minutes:g} minutes"
        + (" (steady: no end_at)" if args.steady else ""),
        "",
        "Command: `python bench/sustained.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"- {schedules:,} fixed-rate schedules (`every {PERIOD_S}s`, anchors spread evenly), {args.tenants} tenants; "
        f"{commands:,} create/cancel commands sent meanwhile ({args.command_rate:g}/s)",
        f"- expected occurrences: {len(expected):,}; missing: {missing:,}; unexpected: {unexpected:,}; "
        f"duplicates: {duplicates:,}",
        "- engine CPU per occurrence: the engine process's `process_cpu_seconds_total` (every thread, librdkafka's "
        "included) over its `scheduler_occurrences_dispatched_total`, per minute",
        "",
        "## Lag `seen_at - scheduled_for` per minute (ms)",
        "",
        "| minute | occurrences | p50 | p95 | p99 | max | engine CPU µs/occ | RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    measured: list[int] = []
    for minute in sorted(per_minute):
        values = sorted(per_minute[minute])
        if minute >= args.warmup:
            measured += values
        lines.append(f"| {minute} | {len(values):,} | {percentile(values, 0.5):,} | {percentile(values, 0.95):,} | "
                     f"{percentile(values, 0.99):,} | {values[-1]:,} | {_fmt(cpu_us.get(minute))} | "
                     f"{_fmt(rss_mib.get(minute))} |")
    measured.sort()
    kept = [m for m in sorted(cpu_us) if m >= args.warmup]
    summary = {
        "rate": args.rate, "minutes": args.minutes, "steady": args.steady, "warmup_minutes": args.warmup,
        "expected": len(expected), "missing": missing, "duplicates": duplicates,
        "lag_p50_ms": percentile(measured, 0.5), "lag_p99_ms": percentile(measured, 0.99),
        "lag_max_ms": measured[-1] if measured else 0,
        "cpu_us_per_occurrence": _median([cpu_us[m] for m in kept]),
        "rss_first_half_mib": None, "rss_last_half_mib": None,
    }
    rss_kept = [rss_mib[m] for m in sorted(rss_mib) if m >= args.warmup]
    if len(rss_kept) >= 2:
        half = len(rss_kept) // 2
        summary["rss_first_half_mib"] = sum(rss_kept[:half]) / half
        summary["rss_last_half_mib"] = sum(rss_kept[half:]) / (len(rss_kept) - half)
    lines += ["", f"## After the {args.warmup:g}-minute warm-up", "",
              f"- lag p50 {summary['lag_p50_ms']:,} ms, **p99 {summary['lag_p99_ms']:,} ms**, max "
              f"{summary['lag_max_ms']:,} ms over {len(measured):,} occurrences",
              f"- engine CPU per occurrence, median of the minutes: **{_fmt(summary['cpu_us_per_occurrence'])} µs**"]
    if summary["rss_first_half_mib"] is not None:
        first, last = summary["rss_first_half_mib"], summary["rss_last_half_mib"]
        lines.append(f"- RSS mean {first:,.0f} MiB in the first half, {last:,.0f} MiB in the last half "
                     f"({(last / first - 1) * 100:+.1f} %)")
    try:
        plots = plot(args.rate, start_ms, per_minute, samples)
        lines += ["", "Plots (not kept in git): " + ", ".join(f"`bench/results/{p.name}`" for p in plots), ""]
    except ImportError:  # matplotlib is in the `bench` extra
        lines += ["", "No plots: matplotlib is not installed (`pip install -e '.[bench]'`).", ""]
    path = RESULTS / f"sustained-{args.rate}.md"
    path.write_text("\n".join(lines) + "\n")
    path.with_suffix(".json").write_text(json.dumps(summary, indent=1) + "\n")
    return path


def per_minute_engine(start_ms: int, samples: list[Sample]) -> tuple[dict[int, float], dict[int, float]]:
    """Engine CPU µs per dispatched occurrence and mean RSS (MiB), per minute since the start."""
    by_minute: dict[int, list[Sample]] = defaultdict(list)
    for sample in samples:
        by_minute[(sample[0] - start_ms) // 60_000].append(sample)
    cpu: dict[int, float] = {}
    rss: dict[int, float] = {}
    previous: Sample | None = None
    for minute in sorted(by_minute):
        group = by_minute[minute]
        rss[minute] = sum(s[1] for s in group) / len(group) / 2**20
        first = previous or group[0]
        last = group[-1]
        if last[5] > first[5]:
            cpu[minute] = (last[4] - first[4]) / (last[5] - first[5]) * 1e6
        previous = last
    return cpu, rss


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def _fmt(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def plot(rate: int, start_ms: int, per_minute: dict[int, list[int]], samples: list[Sample]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    minutes = sorted(per_minute)
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        ax1.plot(minutes, [percentile(sorted(per_minute[m]), q) / 1000 for m in minutes], marker="o", label=label)
    ax1.set_ylabel("lag (s)")
    ax1.legend()
    ax1.grid(True, alpha=0.3)
    ax2.plot([(t - start_ms) / 60_000 for t, *_ in samples], [s[1] / 2**20 for s in samples])
    ax2.set_ylabel("engine RSS (MiB)")
    ax2.set_xlabel("minutes since start")
    ax2.grid(True, alpha=0.3)
    fig.suptitle(f"sustained {rate:,}/s")
    path = RESULTS / f"sustained-{rate}.png"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return [path]


if __name__ == "__main__":
    sys.exit(main())
