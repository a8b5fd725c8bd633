"""Strict top-of-the-hour burst: `python bench/peak.py --count 500000 [--tenants 100] [--profile]`.

N strict one-shot schedules due at the same second (80% in one tenant, the rest spread over small
tenants); reports lag p50/p95/p99/max from `scheduled_for` to `read_committed` visibility, small vs
large tenants, completeness, the dispatch rate against the raw transactional ceiling measured in the
same run, the lag of ordinary occurrences due in the 20 s before T (`--bystanders-per-s`, default 10), and writes `bench/results/peak-<N>.md` plus PNG plots. See bench/burst.py for the method.
"""
from __future__ import annotations

import sys

from burst import BurstConfig, parser, run


def main() -> int:
    cli = parser(__doc__ or "", 500_000)
    cli.set_defaults(bystanders_per_s=10)
    args = cli.parse_args()
    report = run(BurstConfig("peak", args.count, args.tenants, args.large_share, 0, args.bootstrap, args.lead,
                             args.margin, args.profile, args.engine_arg, bystanders_per_s=args.bystanders_per_s))
    print(report.report.read_text())
    print(f"report: {report.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
