"""Flexible top-of-the-hour burst: `python bench/flex.py --count 500000 [--window 300]`.

N one-shot schedules due at the same second with a flexible window (default 5 minutes): reports
how flat the per-second dispatch is over the window, that every occurrence was enqueued at (not
before) its deterministic `available_at` (`scheduler.timing.jitter.available_at`), the lag from
`available_at` to `read_committed` visibility, and the ceiling ratio; writes
`bench/results/flex-<N>.md` plus PNG plots. See bench/burst.py for the method.
"""
from __future__ import annotations

import sys

from burst import BurstConfig, parser, run


def main() -> int:
    p = parser(__doc__ or "", 500_000)
    p.add_argument("--window", type=float, default=300.0, help="flexible window in seconds")
    args = p.parse_args()
    report = run(BurstConfig("flex", args.count, args.tenants, args.large_share, int(args.window * 1000),
                             args.bootstrap, args.lead, args.margin, args.profile, args.engine_arg))
    print(report.report.read_text())
    print(f"report: {report.report}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
