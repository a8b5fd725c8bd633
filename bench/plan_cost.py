"""The ordinary path's CPU per occurrence, without Kafka: `python bench/plan_cost.py [--schedules N] [--profile]`.

One partition's task over a real RocksDB store (as the engine runs it), `--schedules` fixed-rate
schedules firing every `--period` seconds with evenly spread anchors, driven through simulated turns
every `--turn-ms` of simulated time: dispatch what is due, plan what enters the horizon, build the
changelog records, commit to RocksDB. Prints the process CPU per dispatched occurrence over the
measured span (after a warm-up of one horizon), and with `--profile` the top functions by
cumulative time. What it leaves out: Kafka (librdkafka's produce and the transaction), the
consumer's polling, metrics; `bench/sustained.py` measures the whole engine.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "unit" / "engine"))

from task_builder import admit_schedule, make_task  # noqa: E402

from scheduler.control.client import make_spec  # noqa: E402
from scheduler.engine.timeline_keys import DISPATCH  # noqa: E402

START = 1_800_000_000_000


def admit_all(task, count: int, period_s: int) -> None:
    for n in range(count):
        sid = f"plan-{n:07d}"
        anchor = START + n * period_s * 1000 // count
        spec = make_spec("rate", f"every {period_s}s", anchor_at_ms=anchor, start_at_ms=START, priority="NORMAL")
        admit_schedule(task, sid, spec, START, tenant=f"t{n % 20}")
        if n % 1000 == 999:
            task.changelog_records()
            task.committed({})
    task.changelog_records()
    task.committed({})


def turn(task, now_ms: int, budget: int) -> int:
    sent = 0
    for _, (dispatcher, key, raw) in task.dispatcher.offers(DISPATCH, now_ms, 100_000):
        dispatcher.send(key, raw, now_ms)
        sent += 1
    task.timeline.materialize_due(now_ms, budget)
    task.changelog_records()
    task.committed({})
    return sent


def run(task, seconds: float, turn_ms: int, budget: int, start_ms: int) -> tuple[int, float, int]:
    sent = 0
    cpu = time.process_time()
    now = start_ms
    while now < start_ms + seconds * 1000:
        sent += turn(task, now, budget)
        now += turn_ms
    return sent, time.process_time() - cpu, now


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--schedules", type=int, default=23_150)
    p.add_argument("--period", type=int, default=10,
                   help="seconds between a schedule's fires: 10 as bench/sustained.py; above the horizon (130) "
                        "each planning pass finds one fire, as for the hourly and daily schedules of real loads")
    p.add_argument("--seconds", type=float, default=120.0,
                   help="simulated seconds measured (a multiple of the 60 s planning stride)")
    p.add_argument("--turn-ms", type=int, default=100)
    p.add_argument("--budget", type=int, default=2000)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="plan-cost-") as tmp:
        task = make_task(Path(tmp) / "p0", max_active_schedules=args.schedules + 1)
        admit_all(task, args.schedules, args.period)
        _, _, now = run(task, max(120, args.period), args.turn_ms, args.budget, START)
        profiler = cProfile.Profile() if args.profile else None
        if profiler:
            profiler.enable()
        sent, cpu, _ = run(task, args.seconds, args.turn_ms, args.budget, now)
        if profiler:
            profiler.disable()
        task.store.close()
    print(f"every {args.period}s x{args.schedules}: {sent:,} occurrences in {args.seconds:.0f} simulated s, "
          f"{cpu:.2f} s CPU, {cpu / max(1, sent) * 1e6:.1f} us per occurrence")
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    return 0


if __name__ == "__main__":
    sys.exit(main())
