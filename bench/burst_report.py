"""The burst's analysis and its Markdown report (bench/burst.py)."""
from __future__ import annotations

import math
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import bystanders as around
from burst_common import (
    LARGE,
    PRIORITY,
    PROBE_S,
    RESULTS,
    TXN_RECORDS,
    Arrival,
    BurstConfig,
    now_ms,
    percentile,
    rfc3339,
)
from burst_plots import plot, profile_section


def analyse(config: BurstConfig, prefix: str, due_ms: int, loaded_ms: int, load_s: float,
            calibration_rate: float | None, expected: dict[str, tuple[str, int]],
            bystanders: dict[str, tuple[str, int]], arrivals: list[Arrival],
            per_topic: Counter[str], ceiling: dict[str, Any], interleaved_ceiling: dict[str, Any], profile_path: Path | None,
            engine_args: list[str], engine_metrics: dict[str, float], summary: dict[str, Any]) -> Path:
    bystander_arrivals = [a for a in arrivals if a.occurrence_id in bystanders]
    arrivals = [a for a in arrivals if a.occurrence_id not in bystanders]
    first_seen: dict[str, Arrival] = {}
    duplicates = 0
    for a in arrivals:
        if a.occurrence_id in first_seen:
            duplicates += 1
        else:
            first_seen[a.occurrence_id] = a
    missing = expected.keys() - first_seen.keys()
    unexpected = first_seen.keys() - expected.keys()
    wrong_tenant = sum(1 for oid, a in first_seen.items() if oid in expected and expected[oid][0] != a.tenant)
    ok = [a for oid, a in first_seen.items() if oid in expected]
    early = sum(1 for a in ok if a.timestamp_ms < expected[a.occurrence_id][1])
    # Lag from the instant the occurrence was due: scheduled_for for strict, available_at for flexible.
    visible_lag = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok)
    read_lag = sorted(a.seen_ms - expected[a.occurrence_id][1] for a in ok)
    enq_lag = sorted(a.timestamp_ms - expected[a.occurrence_id][1] for a in ok)
    large = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok if a.tenant == LARGE)
    small = sorted(a.visible_ms - expected[a.occurrence_id][1] for a in ok if a.tenant != LARGE)
    last_seen = max((a.visible_ms for a in ok), default=due_ms)
    dispatch_s = max(0.001, (last_seen - due_ms) / 1000)
    engine_rate = len(ok) / dispatch_s
    ceiling_rate = ceiling["records"] / ceiling["seconds"]
    interleaved_rate = interleaved_ceiling["records"] / interleaved_ceiling["seconds"]
    by = around.summary(due_ms, around.lags(bystanders, {a.occurrence_id: a.visible_ms
                                                           for a in reversed(bystander_arrivals)}))
    by_read = around.summary(due_ms, around.lags(bystanders, {a.occurrence_id: a.seen_ms
                                                              for a in reversed(bystander_arrivals)}))
    stage = summary.get("stage")
    work_rate = stage["work_rate"] if stage and stage.get("work_rate") else None
    summary.update(bystanders_p99_ms=by["p99"], bystanders_max_ms=by["max"], bystanders=by["count"],
                   read_p99_ms=percentile(read_lag, 0.99), bystanders_read_p99_ms=by_read["p99"],
                   work_rate=work_rate, work_ratio=work_rate / ceiling_rate if work_rate else None,
                   staged_share=stage["staged"] / max(1, len(expected)) if stage else 0.0,
                   visible_ratio=engine_rate / ceiling_rate)
    summary.update(count=len(expected), arrived=len(ok), missing=len(missing), unexpected=len(unexpected),
                   p50_ms=percentile(visible_lag, 0.5), p99_ms=percentile(visible_lag, 0.99),
                   max_ms=visible_lag[-1] if visible_lag else 0, engine_rate=engine_rate, ceiling_rate=ceiling_rate)

    RESULTS.mkdir(parents=True, exist_ok=True)
    stem = (f"scale-{config.count}-idle{config.idle}" if config.measure_state
            else f"{config.name}-{config.count}")
    try:
        plots = plot(stem, config, due_ms, ok, expected)
    except ImportError:  # the bench extras are not installed: the report is complete without its plots
        print("no plots: install the bench extras (pip install -e '.[dev,bench]')", file=sys.stderr)
        plots = []
    lines = [
        f"# bench/{config.name}: {config.count:,} one-shot schedules due at the same instant",
        "",
        f"Run at {rfc3339(now_ms())} on {os.cpu_count()} cores (broker, engine, reader and loader on the same machine).",
        "",
        "Command: `" + " ".join(["python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]) + "`",
        "",
        f"- schedules: {config.count:,}, tenant `{LARGE}` holds {sum(1 for v in expected.values() if v[0] == LARGE):,}, "
        f"{config.tenants} small tenants share the rest; priority {PRIORITY}; "
        f"flexible window {config.window_ms} ms; prefix `{prefix}`",
        f"- engine: one `scheduler run {' '.join(engine_args)}` process",
        f"- creates: {config.count:,} accepted in {load_s:.1f}s ({config.count / load_s:,.0f}/s end to end)"
        + (f"; calibrated create rate beforehand {calibration_rate:,.0f}/s" if calibration_rate else ""),
        f"- T = {rfc3339(due_ms)}; loading finished {(due_ms - loaded_ms) / 1000:.1f}s before T",
        f"- idle schedules (due in 60 days, beyond the horizon) loaded first: {config.idle:,}"
        + (f" at {summary['idle_create_rate']:,.0f} creates/s" if summary.get("idle_create_rate") else "")
        + (f", written into the schedules changelog in {summary['preload_s']:.0f}s before the engine started "
           f"(bench/idle_states.py: no commands, no admission), which restored them in "
           f"{summary['start_restore_s']:.1f}s" if summary.get("preload_s") is not None else ""),
        "",
        "## Completeness",
        "",
        f"- expected occurrence ids: {len(expected):,}; arrived: {len(ok):,}; missing: {len(missing):,}; "
        f"unexpected ids: {len(unexpected):,}; duplicates: {duplicates:,}; in the wrong tenant: {wrong_tenant:,}",
        f"- visible time from the broker's last stable offsets (bench/visibility.py) for "
        f"{sum(1 for a in ok if a.probed):,} of {len(ok):,} (the rest: the reader's receipt)",
        f"- enqueued before their due instant (`kafka timestamp < {'available_at' if config.window_ms else 'scheduled_for'}`): {early:,}",
        f"- records per topic: {len(per_topic)} topics, min {min(per_topic.values(), default=0):,}, "
        f"max {max(per_topic.values(), default=0):,}",
        "",
        "## Lag (ms), `visible_at - " + ("available_at" if config.window_ms else "scheduled_for") + "`",
        "",
        "`visible_at` is when the broker first answered that the record's partition's last stable offset",
        f"had passed it (bench/visibility.py: every {PROBE_S * 1000:.0f} ms, so at most that plus a round trip late),",
        "or when the reader received it if that was earlier: the moment any `read_committed` consumer could",
        "read it, commit included. `read` is when the one `read_committed` reader (its own process, reading",
        "every topic of the run on the same cores) received it; `enqueued` is the record's Kafka timestamp",
        "(set when the engine produced it; a staged record carries the instant).",
        "",
        "| measure | count | p50 | p95 | p99 | max |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for label, values in (("visible (all)", visible_lag), ("read by the one reader (all)", read_lag),
                          ("enqueued (all)", enq_lag),
                          (f"visible, large tenant `{LARGE}`", large), ("visible, small tenants", small)):
        lines.append(f"| {label} | {len(values):,} | {percentile(values, 0.5):,} | {percentile(values, 0.95):,} | "
                     f"{percentile(values, 0.99):,} | {values[-1] if values else 0:,} |")
    first_visible: dict[str, int] = {}
    first_read: dict[str, int] = {}
    for a in bystander_arrivals:
        first_visible.setdefault(a.occurrence_id, a.visible_ms)
        first_read.setdefault(a.occurrence_id, a.seen_ms)
    stage = summary.get("stage")
    lines += around.section(due_ms, bystanders, first_visible, visible_lag, stage.get("window_ms") if stage else None,
                            first_read, read_lag)
    p99 = percentile(visible_lag, 0.99)
    ratio = engine_rate / ceiling_rate
    lines += [
        "",
        "## Dispatch rate and the transactional ceiling",
        "",
        f"- engine: {len(ok):,} occurrences visible {dispatch_s:.2f}s after T: **{engine_rate:,.0f}/s**",
        f"- ceiling (one process, same producer settings as the engine, {TXN_RECORDS:,} records per transaction, "
        f"same topics, {ceiling['value_bytes']:.0f}-byte values): {ceiling['records']:,} in {ceiling['seconds']:.2f}s: "
        f"**{ceiling_rate:,.0f}/s**" + (f" ({ceiling['redone']} transaction(s) timed out and were redone)"
                                         if ceiling.get("redone") else ""),
        f"- ratio engine / ceiling: **{ratio:.2f}**" + (" (not a capacity figure here: a flexible window spreads "
                                                        "the dispatch over the window by design)"
                                                        if config.window_ms else ""),
        f"- the same ceiling with the tenants interleaved as the engine's fair dispatch sends them (each "
        f"transaction touches every tenant's partitions): {interleaved_rate:,.0f}/s; engine / that: "
        f"{engine_rate / interleaved_rate:.2f}",
        "- note: per occurrence the engine also writes a timeline-changelog tombstone in the same transaction,",
        "  so it moves twice the records of the ceiling.",
        "",
    ]
    lines += engine_metrics_section(engine_metrics)
    stage = summary.get("stage")
    lines += ["## Staging (scheduler/engine/stage_policy.py), from the engine's log", ""]
    if stage:
        lines += [f"- staging lead: began {stage['lead_s']:.1f}s before T; {stage['staged']:,} occurrences prepared "
                  f"in memory over {stage['seconds']:.1f}s of the lead ({stage['prepare_s']:.2f}s of work; no "
                  "transaction open, nothing held back)",
                  f"- produce window: its transaction began **{stage['window_ms']:,} ms before T**; producing took "
                  f"{stage['produce_s']:.2f}s of work (in slices between turns; delivery waited for at the instant if "
                  f"not done by then); committed in {stage['commit_s']:.3f}s, visible "
                  f"{stage['visible_ms']:,} ms after T; readers of its partitions were held {stage['open_ms']:,} ms",
                  f"- **the engine's own per-occurrence rate**: {stage['staged']:,} / (prepare {stage['prepare_s']:.2f}s "
                  f"+ produce {stage['produce_s']:.2f}s + commit {stage['commit_s']:.3f}s) = **{stage['work_rate']:,.0f}/s**, "
                  f"**{stage['work_rate'] / ceiling_rate:.2f}** of the ceiling above (both timed in-process with "
                  "perf_counter around the work: the ceiling from its first produce to its last commit). "
                  f"{stage['staged'] / max(1, len(expected)):.0%} of the burst was staged; the rest went the ordinary way after T",
                  ""]
    else:
        lines += ["- no stage for this burst: all of it went the ordinary way after T", ""]
    if not config.window_ms:
        small_ok = percentile(small, 0.99) <= max(percentile(large, 0.99), 1)
        lines += [
            "## Targets",
            "",
            f"- p99 <= 5 s: **{'met' if p99 <= 5000 else 'NOT met'}** ({p99:,} ms)",
            f"- every occurrence present, none else: **{'met' if not missing and not unexpected else 'NOT met'}**",
            f"- small tenants' p99 no worse than the large tenant's: **{'met' if small_ok else 'NOT met'}**",
            f"- dispatch rate >= 0.5 x ceiling: **{'met' if ratio >= 0.5 else 'NOT met'}** ({ratio:.2f})",
            "",
        ]
    else:
        lines += flex_section(due_ms, config.window_ms, ok, expected)
    lines += ["## Dispatch over time", "", "| second after T | occurrences visible |", "|---:|---:|"]
    per_second = Counter((a.visible_ms - due_ms) // 1000 for a in ok)
    shown = sorted(per_second.items())
    if len(shown) > 40:
        shown = shown[:20] + [(None, None)] + shown[-10:]
    for second, n in shown:
        lines.append("| ... | ... |" if second is None else f"| {second} | {n:,} |")
    lines += ["", "Plots (not kept in git): " + (", ".join(f"`bench/results/{p.name}`" for p in plots) or "none"), ""]
    if profile_path is not None:
        lines += profile_section(profile_path)
    path = RESULTS / f"{stem}.md"
    path.write_text("\n".join(lines) + "\n")
    return path


_STAGING = re.compile(r"staging the burst due at (\d+) \((\d+) entries, ([\d.]+) s ahead\)")
_STAGED = re.compile(r"staged (\d+) occurrences due at (\d+) in ([\d.]+) s")
_COMMITTED = re.compile(r"committed the staged burst due at (\d+): (\d+) occurrences visible (-?\d+) ms after it; "
                        r"its transaction was open (\d+) ms; work: prepare ([\d.]+) s, produce ([\d.]+) s, "
                        r"commit ([\d.]+) s")
_PRODUCED = re.compile(r"produced the stage due at (\d+): (\d+) occurrences in ([\d.]+) s, (-?\d+) ms before it")


def staged_burst(log: str, due_ms: int) -> dict[str, float] | None:
    """What the engine logged of staging the burst due at `due_ms` (None when it was not staged): the lead,
    the preparation, the produce window and the work each phase took (scheduler/engine/stage_runner.py)."""
    def last(pattern: re.Pattern[str], group: int) -> re.Match[str] | None:
        found = [m for m in pattern.finditer(log) if int(m.group(group)) == due_ms]
        return found[-1] if found else None

    began, staged, produced, committed = (last(_STAGING, 1), last(_STAGED, 2), last(_PRODUCED, 1),
                                          last(_COMMITTED, 1))
    if not (began and staged and produced and committed):
        return None
    count, seconds = int(committed.group(2)), float(staged.group(3))
    prepare_s, produce_s, commit_s = (float(committed.group(n)) for n in (5, 6, 7))
    open_ms = int(committed.group(4))
    return {"lead_s": float(began.group(3)), "staged": count, "seconds": seconds, "prepare_s": prepare_s,
            "produce_s": produce_s, "commit_s": commit_s, "open_ms": open_ms,
            "window_ms": open_ms - int(committed.group(3)),
            "work_rate": count / max(prepare_s + produce_s + commit_s, 0.001),
            "visible_ms": int(committed.group(3))}


def engine_metrics_section(delta: dict[str, float]) -> list[str]:
    """What the engine's /metrics says happened between the end of loading and the end of dispatch."""
    txns = delta.get("scheduler_transactions_total", 0.0)
    commits = delta.get("scheduler_transaction_commit_seconds_count", 0.0)
    lag_n = delta.get("scheduler_schedule_lag_seconds_count", 0.0)
    return [
        "## The engine's own metrics over the dispatch (scraped from `--metrics-port`)",
        "",
        f"- transactions: {txns:,.0f}; mean `commit_transaction` latency "
        f"{delta.get('scheduler_transaction_commit_seconds_sum', 0.0) / commits if commits else 0:.3f}s",
        f"- occurrences dispatched: {delta.get('scheduler_occurrences_dispatched_total', 0.0):,.0f}; "
        f"mean schedule lag (due instant to commit) "
        f"{delta.get('scheduler_schedule_lag_seconds_sum', 0.0) / lag_n if lag_n else 0:.2f}s",
        f"- of those, staged ahead and made visible by one commit at T (scheduler/engine/stage_policy.py): "
        f"{delta.get('scheduler_staged_occurrences_total', 0.0):,.0f}; that commit took "
        f"{delta.get('scheduler_stage_commit_seconds_sum', 0.0):.3f}s. Staged records carry T as their "
        f"Kafka timestamp, so for them `enqueued` above is 0 and `seen` is the measure",
        f"- engine CPU in the 5 s after the dispatch, with nothing due: {delta.get('idle_cpu_share', 0.0):.0%} of a core",
        f"- held back by tenant rate limits: {delta.get('scheduler_tenant_held_back_total', 0.0):,.0f}; "
        f"engine RSS change over the dispatch {delta.get('process_resident_memory_bytes', 0.0) / 2**20:+,.0f} MiB",
        "",
    ]


def flex_section(due_ms: int, window_ms: int, ok: list[Arrival], expected: dict[str, tuple[str, int]]) -> list[str]:
    seconds = window_ms // 1000
    planned = Counter((expected[a.occurrence_id][1] - due_ms) // 1000 for a in ok)
    actual = Counter((a.timestamp_ms - due_ms) // 1000 for a in ok)
    counts = [actual.get(s, 0) for s in range(seconds)]
    mean = sum(counts) / max(1, len(counts))
    sd = math.sqrt(sum((c - mean) ** 2 for c in counts) / max(1, len(counts)))
    wrong_slot = sum(1 for a in ok if a.available_at_ms != expected[a.occurrence_id][1])
    late_second = sum(1 for a in ok if a.timestamp_ms - expected[a.occurrence_id][1] >= 1000)
    return [
        "## Flatness over the window",
        "",
        f"- enqueued per second over the {seconds}s window: mean {mean:,.0f}, sd {sd:,.0f} "
        f"(cv {sd / mean if mean else 0:.3f}), min {min(counts, default=0):,}, max {max(counts, default=0):,}",
        f"- the deterministic plan (`available_at` per occurrence) per second: min {min(planned.values(), default=0):,}, "
        f"max {max(planned.values(), default=0):,}",
        f"- occurrences whose record's `available_at_ms` differs from `scheduler.timing.jitter.available_at`: {wrong_slot:,}",
        f"- occurrences enqueued 1 s or more after their `available_at`: {late_second:,}",
        "",
    ]
