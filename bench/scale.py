"""Does dispatch cost grow with the due set or with the total? `python bench/scale.py --count 50000 --idle 0,100000`.

Runs the strict burst of bench/peak.py once per idle-set size (schedules due beyond the horizon,
loaded before the burst), each on a fresh broker and engine, and also measures the command
ingestion rate, RocksDB and changelog bytes per schedule, and the time to restore the deleted local
state from the changelog. Writes `bench/results/scale-<N>.md` comparing the runs.
"""
from __future__ import annotations

import sys

from burst import BurstConfig, parser, run
from burst_common import RESULTS


def main() -> int:
    p = parser(__doc__ or "", 50_000)
    p.add_argument("--idle", default="0,100000", help="comma-separated idle-set sizes")
    p.add_argument("--preload-idle", action="store_true",
                   help="write the idle set into the schedules changelog before the engine starts, instead of "
                        "creating it through commands (bench/idle_states.py)")
    args = p.parse_args()
    rows = []
    for idle in (int(x) for x in args.idle.split(",")):
        result = run(BurstConfig("peak", args.count, args.tenants, args.large_share, 0, args.bootstrap, args.lead,
                                 args.margin, args.profile, args.engine_arg, idle=idle, preload_idle=args.preload_idle,
                                 measure_state=True))
        rows.append(result.summary)
        print(f"idle {idle:,}: {result.report}", file=sys.stderr)
    base = rows[0]["engine_rate"]
    base_stage = (rows[0]["stage"] or {}).get("work_rate")
    lines = [
        f"# bench/scale: the {args.count:,}-occurrence strict burst with idle schedules in the stores",
        "",
        "Command: `python bench/scale.py " + " ".join(sys.argv[1:]) + "`",
        "",
        "| idle schedules | p50 ms | p99 ms | max ms | dispatch /s | vs no idle | ceiling /s | staged /s | "
        "staged vs no idle | missing |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['idle']:,} | {r['p50_ms']:,} | {r['p99_ms']:,} | {r['max_ms']:,} | "
                     f"{r['engine_rate']:,.0f} | {r['engine_rate'] / base:.2f} | {r['ceiling_rate']:,.0f} | "
                     + (f"{r['stage']['work_rate']:,.0f} | " if r["stage"] else "not staged | ")
                     + (f"{r['stage']['work_rate'] / base_stage:.2f} | " if r["stage"] and base_stage else "- | ")
                     + f"{r['missing']:,} |")
    lines += ["", "Dispatch /s is occurrences visible to the read_committed reader per second after T; with a staged",
              "burst (scheduler/engine/stage_policy.py) the engine's per-occurrence work happens before T, and staged /s",
              "is its rate there: the figure to compare for the cost of the idle set.",
              "", "## State per schedule, restore, ingestion", "",
              "| schedules in the stores | RocksDB bytes/schedule | schedules changelog bytes/schedule | "
              "timeline changelog bytes | restore s (all partitions) | restore s per million | creates/s |",
              "|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        st = r["state"]
        n = st["schedules"]
        changelog = st["changelog_bytes"]
        lines.append(
            f"| {n:,} | {st['rocksdb_bytes'] / n:,.0f} | "
            f"{changelog.get('schedules', 0) / n:,.0f} | {changelog.get('timeline-changelog', 0):,} | "
            f"{st['restore_s']:.1f} | {st['restore_s'] / n * 1e6:,.0f} | {st['create_rate']:,.0f} |")
    lines += ["", "Creates/s is the idle load's end-to-end rate (send to ACCEPTED) when there is one, else the burst's.",
              "Changelog bytes are the broker's `.log` segment bytes on disk, before compaction (local broker only);",
              "the timeline changelog holds the burst's entries and their tombstones. RocksDB bytes are the",
              "allocated size of the state directory (WAL included) after the engine stopped. Restore s is, after",
              "the local state was deleted and the engine restarted, the longest time from a partition's",
              "assignment to its dispatching (stage producers, log bounds and replay; the partitions restore",
              "side by side off the rebalance path); the process start and the group join are not included.", ""]
    path = RESULTS / f"scale-{args.count}.md"
    path.write_text("\n".join(lines) + "\n")
    print(path.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
