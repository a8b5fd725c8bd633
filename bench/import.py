"""Bulk import end to end: `python bench/import.py [--count 100000] [--bootstrap HOST:PORT] [--profile]`.

One broker (ours, or --bootstrap / $KAFKA_BOOTSTRAP_SERVERS), a fresh topic prefix, one `scheduler run`
child, and a JSON Lines file of `--count` schedules (one-shots due in 60 days and daily crons, half
each by default, over `--tenants` tenants) imported with the CLI, `scheduler schedules import FILE --json`,
as a child process: the figure is what a user gets. A warm-up import (tenant topics, first transactions)
goes first; then the file is imported, then imported again (every line already exists).

Reported per import: creates/s over the import's own seconds (the CLI's summary: from reading the first
line to the last ACCEPTED result), the child's wall time (Python start and connecting included), the
client's CPU per line (the child's rusage) and the engine's CPU per create (its
`process_cpu_seconds_total` before and after) and, when known, the broker's (/proc). `--profile` runs the engine under cProfile and prints its
top functions by own time over the whole run (warm-up and both imports).
Results go to `bench/results/import-<count>.md`.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench_engine import Engine, scrape
from burst_common import RESULTS, rfc3339
from children import interruptible
from scheduler.broker.local import LocalBroker, free_port
from scheduler.kafka.admin import delete_prefixed_topics, ensure_topics
from scheduler.wire.topology import Topology

REPO = Path(__file__).resolve().parents[1]
TOPOLOGY = Topology.load()
CRON = {"kind": "CRON", "expression": "0 3 * * *", "time_zone": "Europe/Berlin"}


class ProfiledEngine(Engine):
    """`scheduler run` under cProfile: the profile is written when SIGTERM stops the loop cleanly."""

    def __init__(self, bootstrap: str, prefix: str, workdir: Path, args: list[str], profile: Path) -> None:
        self.log_path = workdir / f"engine-{time.time_ns()}.log"
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "scheduler", "run", "--instance-id",
             "bench", "--open-tenants", "--state-dir", str(workdir / "state"), *args],
            cwd=REPO, env=env, stdout=open(self.log_path, "ab"), stderr=subprocess.STDOUT, start_new_session=True)


def write_lines(path: Path, count: int, tenants: int, cron_share: float, tag: str) -> None:
    """`count` distinct lines (each names its schedule, so none is a DUPLICATE of another)."""
    due = rfc3339((math.ceil(time.time()) + 60 * 86400) * 1000)
    with path.open("w", encoding="utf-8") as out:
        for n in range(count):
            spec = CRON if int((n + 1) * cron_share) > int(n * cron_share) else {"kind": "ONCE", "expression": due}
            out.write(json.dumps({"tenant": f"t{n % tenants}", "schedule_id": f"{tag}-{n:08d}",
                                  "spec": {**spec, "payload": f'{{"n": {n}}}'}}) + "\n")


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU of a process so far (/proc), 0 when not known."""
    if pid is None:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_import(bootstrap: str, prefix: str, path: Path, metrics_port: int, extra: list[str],
               broker_pid: int | None) -> dict[str, Any]:
    """One `scheduler schedules import` child; its summary plus wall time and the CPU of every side."""
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
    engine_before = scrape(metrics_port)["process_cpu_seconds_total"]
    broker_before = cpu_seconds(broker_pid)
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "scheduler", "schedules", "import", str(path), "--json",
                           "--timeout", "120", *extra], cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    engine_cpu = scrape(metrics_port)["process_cpu_seconds_total"] - engine_before
    broker_cpu = cpu_seconds(broker_pid) - broker_before
    if done.returncode not in (0, 7):
        raise RuntimeError(f"import exited {done.returncode}:\n{done.stderr[-3000:]}")
    summary = json.loads(done.stdout)
    accepted = summary["created"] + summary["already_existed"]
    if accepted != summary["lines"]:
        raise RuntimeError(f"{summary['lines'] - accepted} lines not accepted: {summary['rejected']}")
    client_cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return {**summary, "wall_s": wall, "client_us_per_line": client_cpu / summary["lines"] * 1e6,
            "engine_us_per_create": engine_cpu / summary["lines"] * 1e6,
            "broker_us_per_create": broker_cpu / summary["lines"] * 1e6 if broker_pid else None,
            "exit": done.returncode}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--tenants", type=int, default=10)
    p.add_argument("--cron-share", type=float, default=0.5, help="fraction of lines that are crons")
    p.add_argument("--bootstrap", help="use this broker (default $KAFKA_BOOTSTRAP_SERVERS, else start one)")
    p.add_argument("--broker-pid", type=int, help="the --bootstrap broker's pid, to count its CPU too")
    p.add_argument("--profile", action="store_true", help="run the engine under cProfile")
    p.add_argument("--import-arg", action="append", default=[], help="extra `schedules import` argument")
    p.add_argument("--engine-arg", action="append", default=[], help="extra `scheduler run` argument")
    args = p.parse_args()
    with interruptible():
        return bench(args)


def bench(args: argparse.Namespace) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="bench-import-"))
    bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
    broker = engine = None
    prefix = f"imp{uuid.uuid4().hex[:6]}"
    profile = workdir / "engine.prof"
    try:
        if not bootstrap:
            broker = LocalBroker(workdir / "kafka", port=free_port(), controller_port=free_port())
            bootstrap = broker.start()
            args.broker_pid = broker.pid()
        tenants = [f"t{n}" for n in range(args.tenants)]
        ensure_topics(bootstrap, TOPOLOGY, prefix, tenants=tenants, timeout=120)
        metrics_port = free_port()
        engine_args = ["--metrics-port", str(metrics_port), *args.engine_arg]
        engine = (ProfiledEngine(bootstrap, prefix, workdir, engine_args, profile) if args.profile
                  else Engine(bootstrap, prefix, workdir, engine_args))
        engine.wait_assigned()
        warm, lines = workdir / "warm.jsonl", workdir / "lines.jsonl"
        write_lines(warm, min(5_000, args.count), args.tenants, args.cron_share, "warm")
        write_lines(lines, args.count, args.tenants, args.cron_share, "imp")
        rows = {}
        for label, path in (("warm-up", warm), ("import", lines), ("re-import", lines)):
            rows[label] = run_import(bootstrap, prefix, path, metrics_port, args.import_arg, args.broker_pid)
            r = rows[label]
            print(f"{label}: {r['lines']:,} lines, {r['created']:,} created, {r['already_existed']:,} existed in "
                  f"{r['seconds']:.1f}s ({r['accepted_per_s']:,.0f}/s), wall {r['wall_s']:.1f}s, client "
                  f"{r['client_us_per_line']:.0f} us/line, engine {r['engine_us_per_create']:.0f} us/create, broker "
                  f"{r['broker_us_per_create'] or 0:.0f} us/create",
                  file=sys.stderr)
        engine.stop()
        text = report(args, rows, profile if args.profile else None)
        path = RESULTS / f"import-{args.count}.md"
        path.write_text(text)
        print(text)
        return 0
    finally:
        if engine is not None:
            engine.stop()
        if bootstrap and broker is None:
            delete_prefixed_topics(bootstrap, prefix)
        if broker is not None:
            broker.stop()


def report(args: argparse.Namespace, rows: dict[str, dict[str, Any]], profile: Path | None) -> str:
    lines = [f"# bench/import: {args.count:,} schedules through `scheduler schedules import`", "",
             "Command: `python bench/import.py " + " ".join(sys.argv[1:]) + "`", "",
             "| import | lines | created | already existed | seconds | creates/s | wall s | "
             "client us/line | engine us/create | broker us/create |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for label, r in rows.items():
        lines.append(f"| {label} | {r['lines']:,} | {r['created']:,} | {r['already_existed']:,} | {r['seconds']:.1f} "
                     f"| {r['accepted_per_s']:,.0f} | {r['wall_s']:.1f} | {r['client_us_per_line']:.0f} "
                     f"| {r['engine_us_per_create']:.0f} | "
                     + (f"{r['broker_us_per_create']:.0f} |" if r["broker_us_per_create"] is not None else "- |"))
    lines += ["", "Creates/s: accepted lines over the CLI's own seconds (first line read to last result). Wall s",
              "adds the child's start and connection. CPU per line/create: the CLI child's rusage, and the engine's",
              "process_cpu_seconds_total over the import, the broker's from /proc (ours, or --broker-pid; on a shared",
              "broker it includes whatever else it served meanwhile).", ""]
    if profile is not None and profile.exists():
        stats = pstats.Stats(str(profile))
        total = rows["warm-up"]["lines"] + rows["import"]["lines"] + rows["re-import"]["lines"]
        top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:20]  # type: ignore[attr-defined]
        lines += [f"## Engine profile (cProfile, own time over all {total:,} lines of the three imports)", "",
                  "| function | calls | own s | own us per line |", "|---|---:|---:|---:|"]
        for (file, line, name), (_, calls, own, _, _) in top:
            where = f"{Path(file).name}:{line} {name}" if line else name
            lines.append(f"| `{where}` | {calls:,} | {own:.2f} | {own / total * 1e6:.1f} |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
