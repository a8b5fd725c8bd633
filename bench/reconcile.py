"""Benchmark: `scheduler reconcile` over millions of occurrences in a real PostgreSQL ledger, before and after.

Run:  .venv/bin/python bench/reconcile.py [--occurrences 1000000] [--schedules 1000] [--rounds 1]
      [--before /tmp/before] [--jobs 1,2] [--database-url URL]   (default: $AUDIT_DATABASE_URL, else a throw-away local server)

Synthetic ledger, shaped as the sink writes it (scheduler/audit/ledger.sql): `--schedules` rate
schedules `every 1s` of one tenant over one window; one schedule in ten was UPDATEd half-way (two
versions, the second on a 2 s period); at least `--occurrences` expected in all, written in time order as
the sinks write them (the table's pages follow the clock). Every expected occurrence has
one dispatch row (plus 0.1 % duplicate deliveries) and a STARTED and a SUCCEEDED attempt row; one in a
thousand also a MISSED event instead. Rows are loaded with COPY, then ANALYZEd.

Timed, `--rounds` times each (median reported), as a child process: `scheduler reconcile --tenant bench
--from A --to B --json` end to end (interpreter start, imports, the expected set by the time core, the
classification, the JSON to /dev/null), from this checkout (once per `--jobs` value if given) and, with
`--before CHECKOUT`, from that checkout's code on the same ledger; the rounds alternate between them, so
that a noisy minute of a shared machine hits every one. Measured: wall
time, occurrences/s, CPU of the child and of PostgreSQL's backends (read from /proc: a local server
only), the child's peak RSS (VmHWM) and the largest backend's peak RSS, sampled every 100 ms.
Not included: loading the rows, network latency to a remote database.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import psycopg

from scheduler.audit.tables import ensure_tables, schema_name
from scheduler.control.client import make_spec
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id

REPO = Path(__file__).resolve().parents[1]
PREFIX = "benchreconcile"
TENANT = "bench"
T0 = 1_777_852_800_000  # 2026-05-04T00:00:00Z
S = 1000


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _spec_json(period: int) -> str:
    import json
    spec = make_spec("rate", f"every {period}s", anchor_at_ms=T0)
    return json.dumps({**spec, "payload": ""})


def load(conn: psycopg.Connection, occurrences: int, schedules: int) -> tuple[int, int, int, dict[str, int]]:
    """Writes the synthetic ledger; returns (from_ms, to_ms, expected occurrences, rows per table)."""
    schema = schema_name(PREFIX)
    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    ensure_tables(conn, PREFIX)
    per = math.ceil(occurrences * 40 / (39 * schedules))  # the updated tenth fires 3/4 as often
    to_ms = T0 + per * S
    topic = f"{PREFIX}.occurrences.{TENANT}.normal"
    offset = expected = 0
    written = {"dispatches": 0, "attempts": 0, "occurrence_events": 0}
    with conn.cursor() as cur:
        with cur.copy(f'COPY "{schema}".schedule_versions (schedule_id, tenant, version, state, spec, '
                      "fired_count, pending, created_at_ms, updated_at_ms) FROM STDIN") as copy:
            for n in range(schedules):
                sid = f"s{n:05d}"
                copy.write_row((sid, TENANT, 1, "ACTIVE", _spec_json(1), per, "[]", T0 - 1, T0 - 1))
                if n % 10 == 0:
                    copy.write_row((sid, TENANT, 2, "ACTIVE", _spec_json(2), per, "[]", T0 - 1, T0 + per * S // 2))
        with cur.copy(f'COPY "{schema}".command_results (kafka_topic, kafka_partition, kafka_offset, schedule_id, '
                      "tenant, command_type, status, version, next_fires_ms, processed_at_ms) FROM STDIN") as copy:
            for n in range(schedules):
                sid = f"s{n:05d}"
                copy.write_row((f"{PREFIX}.command-results", 0, 2 * n, sid, TENANT, "CREATE", "ACCEPTED", 1, "[]",
                                T0 - 1))
                if n % 10 == 0:
                    copy.write_row((f"{PREFIX}.command-results", 0, 2 * n + 1, sid, TENANT, "UPDATE", "ACCEPTED", 2,
                                    "[]", T0 + per * S // 2))
        dispatch_sql = (f'COPY "{schema}".dispatches (kafka_topic, kafka_partition, kafka_offset, kafka_timestamp, '
                        "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, available_at_ms, "
                        "priority, attempt, catch_up) FROM STDIN")
        attempt_sql = (f'COPY "{schema}".attempts (kafka_topic, kafka_partition, kafka_offset, occurrence_id, '
                       "schedule_id, tenant, schedule_version, scheduled_for_ms, attempt, kind, at_ms) FROM STDIN")
        event_sql = (f'COPY "{schema}".occurrence_events (kafka_topic, kafka_partition, kafka_offset, '
                     "occurrence_id, schedule_id, tenant, schedule_version, scheduled_for_ms, kind, reason, count, "
                     "recorded_at_ms) FROM STDIN")
        fires: list[tuple[str, str, int, int]] = []
        for n in range(schedules):
            sid = f"s{n:05d}"
            updated = T0 + per * S // 2 if n % 10 == 0 else None
            at = T0
            while at < to_ms:
                version = 1 if updated is None or at <= updated else 2
                fires.append((occurrence_id(sid, version, to_datetime(at)), sid, version, at))
                at += S if version == 1 else 2 * S
                if version == 1 and updated is not None and at > updated:
                    at = updated + 2 * S - (updated - T0) % (2 * S)
        fires.sort(key=lambda fire: fire[3])  # the sinks write the ledger as time passes: rows in time order
        with cur.copy(dispatch_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 == 999:
                    continue  # MISSED instead, below
                for _ in range(2 if i % 1000 == 500 else 1):
                    copy.write_row((topic, i % 8, offset, to_datetime(at + 3 + i % 17), oid, sid, TENANT, version,
                                    at, at, "NORMAL", 1, False))
                    offset += 1
                    written["dispatches"] += 1
        with cur.copy(attempt_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 != 999:
                    for kind, lag in (("STARTED", 10), ("SUCCEEDED", 20)):
                        copy.write_row((f"{PREFIX}.attempts", i % 8, 2 * i + (kind == "SUCCEEDED"), oid, sid, TENANT,
                                        version, at, 1, kind, at + lag))
                        written["attempts"] += 1
        with cur.copy(event_sql) as copy:
            for i, (oid, sid, version, at) in enumerate(fires):
                if i % 1000 == 999:
                    copy.write_row((f"{PREFIX}.occurrence-events", 0, i, oid, sid, TENANT, version, at, "MISSED",
                                    "bench", 1, at + 400_000))
                    written["occurrence_events"] += 1
        expected = len(fires)
    conn.commit()
    for table in ("schedule_versions", "command_results", "dispatches", "attempts", "occurrence_events"):
        conn.execute(f'ANALYZE "{schema}".{table}')
    conn.commit()
    return T0, to_ms, expected, written


class PostgresSampler:
    """Peaks of the local server's backends while a run lasts (a thread reads /proc every 100 ms): the
    largest backend's resident set (VmRSS: its private memory plus the shared buffers it touched) and
    its private part (RssAnon: sorts, hashes, temp buffers), and all backends' CPU seconds."""

    def __init__(self, postmaster_pid: int | None) -> None:
        self.postmaster = postmaster_pid
        self.peak_rss_kb = self.peak_anon_kb = 0
        self.child: int | None = None  # the reconcile process, once started
        self.child_hwm_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._cpu_before = self._cpu()

    def _backends(self) -> list[int]:
        if self.postmaster is None:
            return []
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == self.postmaster:
                        found.append(int(entry.name))
                except (OSError, IndexError, ValueError):
                    continue
        return found

    def _cpu(self) -> float:
        """The live backends' CPU plus the postmaster's own and its reaped children's: a backend that ends
        moves its time from the first to the last, so differences count it once."""
        if self.postmaster is None:
            return 0.0
        total = 0
        for pid, own in [(self.postmaster, 4), *((pid, 2) for pid in self._backends())]:
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += sum(int(f) for f in fields[11:11 + own])
            except (OSError, IndexError, ValueError):
                continue
        return total / os.sysconf("SC_CLK_TCK")

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            if self.child is not None:  # VmHWM, the peak since exec: wait4's ru_maxrss would count the fork
                try:  # of this bench process, whose loaded rows dwarf a streamed reconcile
                    for line in Path(f"/proc/{self.child}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.child_hwm_kb = max(self.child_hwm_kb, int(line.split()[1]))
                except OSError:
                    pass
            for pid in self._backends():
                try:
                    status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                                  if ":" in line)
                except OSError:
                    continue
                self.peak_rss_kb = max(self.peak_rss_kb, int(status.get("VmRSS", "0 kB").split()[0]))
                self.peak_anon_kb = max(self.peak_anon_kb, int(status.get("RssAnon", "0 kB").split()[0]))

    def __enter__(self) -> PostgresSampler:
        self._cpu_before = self._cpu()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class Run:
    wall_s: float
    cpu_s: float  # the reconcile process: user + system
    rss_mb: float  # its peak resident set
    pg_cpu_s: float
    pg_rss_mb: float
    pg_anon_mb: float


def _cli(url: str, from_ms: int, to_ms: int, repo: Path, postmaster: int | None, extra: tuple[str, ...] = ()) -> Run:
    """One `scheduler reconcile --json` as a child process run from `repo` (this checkout, or another one's
    code for the before figures), measured with os.wait4 (its own rusage) and the PostgreSQL sampler."""
    env = {**os.environ, "AUDIT_DATABASE_URL": url, "SCHEDULER_TOPIC_PREFIX": PREFIX, "PYTHONPATH": str(repo),
           "PYTHONDONTWRITEBYTECODE": "1"}  # nothing written into the other checkout
    with PostgresSampler(postmaster) as pg:
        began = time.perf_counter()
        child = subprocess.Popen([sys.executable, "-m", "scheduler", "reconcile", "--tenant", TENANT, "--from",
                                  _iso(from_ms), "--to", _iso(to_ms), "--json", *extra], cwd=repo, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        pg.child = child.pid
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - began
        time.sleep(0.2)  # the backend's exit, reaped by the postmaster
        pg_cpu = pg._cpu() - pg._cpu_before
    stderr = child.stderr.read() if child.stderr else ""
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"reconcile ({repo}) exited {child.returncode}: {stderr}")
    return Run(elapsed, usage.ru_utime + usage.ru_stime, pg.child_hwm_kb / 1024, pg_cpu, pg.peak_rss_kb / 1024,
               pg.peak_anon_kb / 1024)


def _postmaster(server: object) -> int | None:
    if server is None:
        return None
    pid_file = server.data_dir / "db" / "postmaster.pid"  # type: ignore[attr-defined]
    return int(pid_file.read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--occurrences", type=int, default=1_000_000)
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="also run the CLI from this checkout's code (e.g. /work/main) on the same ledger")
    parser.add_argument("--jobs", default="", metavar="N[,N...]",
                        help="run this checkout once per value with --jobs N (default: once, its default)")
    parser.add_argument("--database-url", default=os.environ.get("AUDIT_DATABASE_URL"))
    args = parser.parse_args()
    server = None
    url = args.database_url
    if url is None:
        from scheduler.audit.postgres import LocalPostgres

        server = LocalPostgres()
        url = server.start()
    runs: dict[str, list[Run]] = {}
    try:
        with psycopg.connect(url) as conn:
            began = time.perf_counter()
            from_ms, to_ms, expected, written = load(conn, args.occurrences, args.schedules)
            load_s = time.perf_counter() - began
        print(f"loaded {expected:,} expected occurrences in {load_s:.1f} s", file=sys.stderr)
        postmaster = _postmaster(server)
        checkouts: list[tuple[str, Path, tuple[str, ...]]] = [
            (f"after (this checkout, --jobs {jobs})", REPO, ("--jobs", jobs)) for jobs in args.jobs.split(",") if jobs
        ] or [("after (this checkout)", REPO, ())]
        if args.before is not None:
            checkouts.insert(0, (f"before ({args.before})", args.before.resolve(), ()))
        for _ in range(args.rounds):  # rounds alternate between the checkouts: a noisy minute hits all of them
            for name, repo, extra in checkouts:
                runs.setdefault(name, []).append(_cli(url, from_ms, to_ms, repo, postmaster, extra))
                print(f"{name}: {runs[name][-1]}", file=sys.stderr)
    finally:
        if server is not None:
            server.destroy()
    med = statistics.median
    rows_text = ", ".join(f"{table} {n:,}" for table, n in written.items())
    lines = [f"# reconcile: {expected:,} expected occurrences", "",
             f"{expected:,} expected occurrences, {args.schedules} schedules; rows: {rows_text} (COPY-loaded in "
             f"{load_s:.0f} s); median of {args.rounds} round(s) each; load average {os.getloadavg()[0]:.1f} on "
             f"{os.cpu_count()} cores at the end (a shared machine: wall time is inflated by other work, CPU time "
             "much less so). CPU: the reconcile process plus PostgreSQL's backends; peak RSS: the reconcile process, "
             "and PostgreSQL's largest backend (VmRSS counts the shared buffers it touched; RssAnon its own memory)",
             "", "| run | wall s | CPU s | CPU s per million occurrences | occurrences/s | reconcile CPU s | "
             "reconcile peak RSS MB | PostgreSQL CPU s | PostgreSQL backend peak RSS MB | its RssAnon MB |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, found in runs.items():
        wall = med(r.wall_s for r in found)
        cpu = med(r.cpu_s + r.pg_cpu_s for r in found)
        lines.append(f"| CLI end to end, {name} | {wall:.1f} | {cpu:.1f} | {cpu * 1_000_000 / expected:.1f} | "
                     f"{expected / wall:,.0f} | {med(r.cpu_s for r in found):.1f} | {max(r.rss_mb for r in found):.0f} | "
                     f"{med(r.pg_cpu_s for r in found):.1f} | {max(r.pg_rss_mb for r in found):.0f} | "
                     f"{max(r.pg_anon_mb for r in found):.0f} |")
    report = REPO / "bench" / "results" / f"reconcile-{args.occurrences}.md"
    report.write_text("\n".join(lines) + "\n")
    print("\n".join(lines) + f"\n\n(written to {report.relative_to(REPO)})")


if __name__ == "__main__":
    main()
