"""Strict top-of-the-hour burst: `python bench/peak.py --count 500000 [--tenants 100] [--runs 3] [--profile]`.

N strict one-shot schedules due at the same second (80% in one tenant, the rest spread over small
tenants); reports lag p50/p95/p99/max from `scheduled_for` to `read_committed` visibility at the broker
(bench/visibility.py) and to the one reader's receipt, small vs large tenants, completeness, and beside
the burst its bystanders: ordinary strict one-shots due in each
second of the 30 s before and the 30 s after T (`--bystanders-per-s`, default 100), in the same tenants'
topics (bench/bystanders.py). Also the staging lead and produce window, the dispatch rate and the engine's
own per-occurrence rate (prepare + produce + commit work) against the raw transactional ceiling measured
in the same run. `--runs 3` repeats the run on one broker and writes the spread of each figure to
`bench/results/peak-<N>-runs.md`; each run's report is `bench/results/peak-<N>[-run<k>].md`, plus PNG
plots. Ctrl-C (or SIGTERM) in any phase stops everything the bench started. See bench/burst.py for the method.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from burst import BurstConfig, parser, run
from burst_common import RESULTS
from children import interruptible, uninterrupted
from scheduler.broker.local import LocalBroker, free_port

FIGURES = (("burst p99 (ms), visible", "p99_ms", "{:,.0f}"),
           ("bystanders p99 (ms), visible", "bystanders_p99_ms", "{:,.0f}"),
           ("bystanders max (ms), visible", "bystanders_max_ms", "{:,.0f}"),
           ("burst p99 (ms), read by the one reader", "read_p99_ms", "{:,.0f}"),
           ("bystanders p99 (ms), read by the one reader", "bystanders_read_p99_ms", "{:,.0f}"),
           ("visible rate / ceiling", "visible_ratio", "{:.2f}"),
           ("engine's own per-occurrence rate (/s)", "work_rate", "{:,.0f}"),
           ("engine's own rate / ceiling", "work_ratio", "{:.2f}"), ("ceiling (/s)", "ceiling_rate", "{:,.0f}"),
           ("share of the burst staged", "staged_share", "{:.0%}"))


def spread(summaries: list[dict[str, Any]], command: str) -> str:
    """Median and range of each figure over the runs, one column per run."""
    runs = len(summaries)
    lines = [f"# bench/peak: {summaries[0]['count']:,} strict occurrences due at one instant, {runs} runs", "",
             f"Command: `{command}`", "",
             "| figure | median | min | max | " + " | ".join(f"run {n + 1}" for n in range(runs)) + " |",
             "|---|---:|---:|---:|" + "---:|" * runs]
    for label, key, fmt in FIGURES:
        values = [s.get(key) for s in summaries]
        known = [v for v in values if v is not None]
        cells = [fmt.format(v) if v is not None else "-" for v in values]
        if known:
            stats = [fmt.format(statistics.median(known)), fmt.format(min(known)), fmt.format(max(known))]
        else:
            stats = ["-", "-", "-"]
        lines.append(f"| {label} | " + " | ".join(stats + cells) + " |")
    lines += ["", "Each run's report: " + ", ".join(f"`{Path(s['report']).name}`" for s in summaries), ""]
    return "\n".join(lines) + "\n"


def main() -> int:
    cli = parser(__doc__ or "", 500_000)
    cli.set_defaults(bystanders_per_s=100, margin=40.0)  # loading ends before the first bystander is due
    cli.add_argument("--runs", type=int, default=1, help="runs on one broker; the spread goes to peak-<N>-runs.md")
    args = cli.parse_args()
    command = " ".join(["python", "bench/peak.py", *sys.argv[1:]])
    with interruptible():
        broker = None
        try:
            bootstrap = args.bootstrap or os.environ.get("KAFKA_BOOTSTRAP_SERVERS")
            if not bootstrap and args.runs > 1:
                broker = LocalBroker(Path(tempfile.mkdtemp(prefix="bench-peak-kafka-")), port=free_port(),
                                     controller_port=free_port())
                print(f"starting a local broker for {args.runs} runs in {broker.data_dir}", file=sys.stderr)
                bootstrap = broker.start()
            summaries = []
            for n in range(args.runs):
                result = run(BurstConfig("peak", args.count, args.tenants, args.large_share, 0, bootstrap, args.lead,
                                         args.margin, args.profile, args.engine_arg,
                                         bystanders_per_s=args.bystanders_per_s))
                report = result.report
                if args.runs > 1:
                    report = result.report.rename(result.report.with_name(f"{result.report.stem}-run{n + 1}.md"))
                print(report.read_text())
                print(f"report: {report}", file=sys.stderr)
                summaries.append({**result.summary, "report": str(report)})
            if args.runs > 1:
                path = RESULTS / f"peak-{args.count}-runs.md"
                path.write_text(spread(summaries, command))
                print(path.read_text())
                print(f"spread over {args.runs} runs: {path}", file=sys.stderr)
        finally:
            if broker is not None:
                with uninterrupted():
                    broker.stop()
                    shutil.rmtree(broker.data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print("interrupted: everything the bench started is stopped", file=sys.stderr)
        sys.exit(130)
