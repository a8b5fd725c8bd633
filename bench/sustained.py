"""The daily average, sustained: `python bench/sustained.py --rate 2315 --minutes 10 [--command-rate 20]`.

200 million occurrences a day is 2,315 a second. `rate × period` fixed-rate schedules ("every 10s")
with evenly spread anchors fire that many a second for the run's duration, while a side thread
keeps creating and cancelling other schedules (commands mixed in). A `read_committed` reader in its
own process stamps every occurrence; the engine's /metrics is scraped every few seconds for its
memory and backlog. Writes `bench/results/sustained-<rate>.md` with lag percentiles per minute,
memory over time, and a completeness check, plus PNG plots.
"""
from __future__ import annotations

import argparse
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
from burst_common import (CALIBRATION_TENANT, RESULTS, TOPOLOGY, end_progress, now_ms, occurrence_topics, owners,
                          percentile, progress, rfc3339)
from scheduler.kafka.admin import ensure_topics
from scheduler.broker.local import LocalBroker, free_port
from scheduler.control.client import SchedulerClient, make_spec
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
        engine = Engine(bootstrap, prefix, workdir, ["--metrics-port", str(port)])
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
                                 end_at_ms=end_ms, priority="NORMAL")
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
        churner.start()
        samples = []
        deadline = end_ms / 1000 + 60
        while counter.value < len(expected) and time.time() < deadline:
            try:
                m = scrape(port)
                samples.append((now_ms(), m.get("process_resident_memory_bytes", 0.0),
                                m.get("scheduler_due_backlog", 0.0), m.get("scheduler_oldest_overdue_seconds", 0.0)))
            except OSError:
                pass
            progress("sustained", min(counter.value, len(expected)), len(expected),
                     f"{(now_ms() - start_ms) / 1000:+.0f}s, RSS {samples[-1][1] / 2**20:,.0f} MiB" if samples else "")
            time.sleep(5)
        time.sleep(2)
        end_progress()
        churn_stop.set()
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


def write_report(args: argparse.Namespace, schedules: int, start_ms: int, expected: dict[str, int],
                 arrivals: list, samples: list[tuple[int, float, float, float]], commands: int) -> Path:
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
    unexpected = len(seen_ids - expected.keys())
    lines = [
        f"# bench/sustained: {args.rate:,} occurrences/s for {args.minutes:g} minutes",
        "",
        "Command: `python bench/sustained.py " + " ".join(sys.argv[1:]) + "`",
        "",
        f"- {schedules:,} fixed-rate schedules (`every {PERIOD_S}s`, anchors spread evenly), {args.tenants} tenants; "
        f"{commands:,} create/cancel commands sent meanwhile ({args.command_rate:g}/s)",
        f"- expected occurrences: {len(expected):,}; missing: {missing:,}; unexpected: {unexpected:,}; "
        f"duplicates: {duplicates:,}",
        "",
        "## Lag `seen_at - scheduled_for` per minute (ms)",
        "",
        "| minute | occurrences | p50 | p95 | p99 | max |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    everything: list[int] = []
    for minute in sorted(per_minute):
        values = sorted(per_minute[minute])
        everything += values
        lines.append(f"| {minute} | {len(values):,} | {percentile(values, 0.5):,} | {percentile(values, 0.95):,} | "
                     f"{percentile(values, 0.99):,} | {values[-1]:,} |")
    everything.sort()
    lines.append(f"| all | {len(everything):,} | {percentile(everything, 0.5):,} | {percentile(everything, 0.95):,} | "
                 f"{percentile(everything, 0.99):,} | {everything[-1] if everything else 0:,} |")
    lines += ["", "## Engine memory (RSS, from its /metrics)", ""]
    if samples:
        rss = [s[1] / 2**20 for s in samples]
        lines.append(f"- first {rss[0]:,.0f} MiB, last {rss[-1]:,.0f} MiB, max {max(rss):,.0f} MiB "
                     f"over {(samples[-1][0] - samples[0][0]) / 1000:.0f}s ({len(samples)} samples)")
    plots = plot(args.rate, start_ms, per_minute, samples)
    lines += ["", "Plots (not kept in git): " + ", ".join(f"`bench/results/{p.name}`" for p in plots), ""]
    path = RESULTS / f"sustained-{args.rate}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


def plot(rate: int, start_ms: int, per_minute: dict[int, list[int]],
         samples: list[tuple[int, float, float, float]]) -> list[Path]:
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
