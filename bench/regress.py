"""The regression suite of the headline figures: `python bench/regress.py [--only steady,burst] [--update]`.

Runs quick versions of the headline benches one after the other on one broker it starts (or
`--bootstrap`): the steady state (bench/sustained.py --steady), a strict burst with bystanders
(bench/peak.py), failover with standbys (bench/failover.py), the bulk import (bench/import.py),
reconcile (bench/reconcile.py, on a throw-away PostgreSQL) and restore (bench/restore.py); reads each
figure from the bench's own report and prints it beside the committed baseline (`bench/baseline.json`),
flagging any figure worse than the baseline by more than its noise band. Exit 1 when one is worse (or a
bench failed), else 0. `--update` writes this run's figures as the new baseline: do that deliberately, in
the commit that improves them, and say so in bench/README.md. Reading the table: bench/README.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
BASELINE = BENCH / "baseline.json"


@dataclass(frozen=True)
class Figure:
    name: str
    unit: str
    lower_is_better: bool
    band: float  # relative noise band: worse by more than this fraction is flagged
    read: Callable[[str], float]  # from the bench's report text


@dataclass(frozen=True)
class Bench:
    name: str
    argv: tuple[str, ...]
    report: str  # the file under bench/results the bench writes
    figures: tuple[Figure, ...]
    takes_bootstrap: bool = True


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _json_field(field: str) -> Callable[[str], float]:
    return lambda text: float(json.loads(text)[field])


def _table_cell(row_start: str, column: int) -> Callable[[str], float]:
    """The `column`-th cell (0-based, after the leading `|`) of the first table row starting with `row_start`."""
    def read(text: str) -> float:
        for line in text.splitlines():
            if line.startswith(row_start):
                cell = line.strip("|").split("|")[column].strip().strip("*")
                if re.fullmatch(r"[\d,.]+", cell):  # not the header row, which may start alike
                    return _number(cell)
        raise ValueError(f"no row starting with {row_start!r} with a number in column {column}")
    return read


def _pattern(regex: str) -> Callable[[str], float]:
    def read(text: str) -> float:
        found = re.search(regex, text)
        if found is None:
            raise ValueError(f"nothing matches {regex!r}")
        return _number(found.group(1))
    return read


BENCHES = (
    Bench("steady", ("sustained.py", "--steady", "--rate", "2315", "--minutes", "4", "--warmup", "1"),
          "sustained-2315.json", (
              Figure("steady lag p99", "ms", True, 0.5, _json_field("lag_p99_ms")),
              Figure("steady engine CPU per occurrence", "µs", True, 0.25, _json_field("cpu_us_per_occurrence")),
              Figure("steady missing", "", True, 0.0, _json_field("missing")))),
    Bench("burst", ("peak.py", "--count", "50000", "--bystanders-per-s", "100"), "peak-50000.md", (
        Figure("burst p99 to visibility", "ms", True, 0.5, _table_cell("| burst | T |", 4)),
        Figure("bystanders p99", "ms", True, 0.5, _table_cell("| bystanders, all |", 4)),
        Figure("burst engine rate / ceiling", "", False, 0.3, _pattern(r"ratio engine / ceiling: \*\*([\d.]+)")),
        Figure("burst missing", "", True, 0.0, _pattern(r"missing: ([\d,]+);")))),
    Bench("failover", ("failover.py", "--idle", "50000", "--per-s", "100"), "failover-50000.md", (
        Figure("failover kill → all moved partitions, standbys", "ms", True, 0.2, _table_cell("| standbys |", 2)),
        Figure("failover lag p99 after the kill, standbys", "ms", True, 0.3, _table_cell("| standbys |", 4)),
        Figure("failover missing, standbys", "", True, 0.0, _table_cell("| standbys |", 7)))),
    Bench("import", ("import.py", "--count", "20000"), "import-20000.md", (
        Figure("bulk import creates/s", "/s", False, 0.3, _table_cell("| import |", 5)),)),
    Bench("reconcile", ("reconcile.py", "--occurrences", "200000", "--schedules", "200", "--rounds", "1"),
          "reconcile-200000.md", (
              Figure("reconcile CPU s per million occurrences", "s", True, 0.3,
                     _table_cell("| CLI end to end", 3)),), takes_bootstrap=False),
    Bench("restore", ("restore.py", "--schedules", "200000", "--rounds", "1", "--header-only"), "restore-200000.md", (
        Figure("restore s per million (wake header)", "s", True, 0.3, _table_cell("| wake header |", 3)),)),
)


def run_bench(bench: Bench, bootstrap: str | None, log_dir: Path, reuse: bool) -> str:
    """Run one bench as a child (its own report in bench/results) and return that report's text; with
    `reuse`, read the report its last run left instead."""
    report = RESULTS / bench.report
    if reuse:
        if not report.exists():
            raise RuntimeError(f"{bench.name}: no report {report} to reuse")
        return report.read_text()
    report.unlink(missing_ok=True)
    argv = [sys.executable, str(BENCH / bench.argv[0]), *bench.argv[1:]]
    if bench.takes_bootstrap and bootstrap:
        argv += ["--bootstrap", bootstrap]
    log = log_dir / f"{bench.name}.log"
    started = time.monotonic()
    with open(log, "wb") as out:
        code = subprocess.run(argv, cwd=BENCH.parent, stdout=out, stderr=subprocess.STDOUT).returncode
    print(f"  {bench.name}: exit {code} in {time.monotonic() - started:.0f}s (log {log})", flush=True)
    if code != 0 or not report.exists():
        raise RuntimeError(f"{bench.name} failed (exit {code}); see {log}")
    return report.read_text()


def verdict(figure: Figure, now: float, base: float | None) -> str:
    if base is None:
        return "new"
    worse = now > base if figure.lower_is_better else now < base
    if not worse:
        return "ok"
    if base == 0:
        return "WORSE"
    change = abs(now - base) / abs(base)
    return "WORSE" if change > figure.band else "ok (noise)"


def table(rows: list[tuple[Figure, float | None, float | None, str]]) -> str:
    lines = ["| figure | baseline | now | now / baseline | band | verdict |", "|---|---:|---:|---:|---:|---|"]
    for figure, base, now, mark in rows:
        ratio = f"{now / base:.2f}" if now is not None and base else "–"
        lines.append(f"| {figure.name} ({figure.unit or 'count'}) | {_show(base)} | {_show(now)} | {ratio} | "
                     f"±{figure.band:.0%} | {mark} |")
    return "\n".join(lines)


def _show(value: float | None) -> str:
    return "–" if value is None else f"{value:,.2f}" if value < 10 else f"{value:,.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", help="comma-separated bench names: " + ",".join(b.name for b in BENCHES))
    p.add_argument("--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS"),
                   help="use this broker (default: start one for the run)")
    p.add_argument("--update", action="store_true", help="write this run's figures as the baseline")
    p.add_argument("--reuse", action="store_true",
                   help="read the reports the benches' last runs left in bench/results instead of running them")
    args = p.parse_args()
    chosen = [b for b in BENCHES if not args.only or b.name in args.only.split(",")]
    baseline = json.loads(BASELINE.read_text()) if BASELINE.exists() else {"figures": {}}
    sys.path.insert(0, str(BENCH.parent))
    from scheduler.broker.local import LocalBroker, free_port

    log_dir = Path(tempfile.mkdtemp(prefix="regress-"))
    broker = None
    bootstrap = args.bootstrap
    if not bootstrap and not args.reuse:
        broker = LocalBroker(log_dir / "kafka", port=free_port(), controller_port=free_port())
        bootstrap = broker.start()
    rows: list[tuple[Figure, float | None, float | None, str]] = []
    failed = False
    try:
        for bench in chosen:
            try:
                text = run_bench(bench, bootstrap, log_dir, args.reuse)
                read = [(figure, figure.read(text)) for figure in bench.figures]
            except (RuntimeError, ValueError, KeyError) as exc:
                print(f"  {bench.name}: {exc}", flush=True)
                failed = True
                rows += [(f, baseline["figures"].get(f.name, {}).get("value"), None, "FAILED") for f in bench.figures]
                continue
            for figure, now in read:
                base = baseline["figures"].get(figure.name, {}).get("value")
                rows.append((figure, base, now, verdict(figure, now, base)))
    finally:
        if broker is not None:
            broker.stop()
    print()
    print(table(rows))
    if args.update and not failed:
        measured = {f.name: {"value": now, "unit": f.unit, "band": f.band} for f, _, now, _ in rows if now is not None}
        baseline["figures"] = {**baseline["figures"], **measured}
        baseline["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        BASELINE.write_text(json.dumps(baseline, indent=1, ensure_ascii=False) + "\n")
        print(f"\nbaseline written: {BASELINE}")
    return 1 if failed or any(mark == "WORSE" for *_, mark in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
