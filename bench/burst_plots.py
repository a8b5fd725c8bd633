"""The burst's plots and its profile summary (bench/burst.py)."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from burst_common import LARGE, RESULTS, Arrival, BurstConfig


def profile_section(path: Path, top: int = 15) -> list[str]:
    """Summarise py-spy's collapsed stacks: inclusive and self share of samples per function."""
    if not path.exists():
        return ["## Profile", "", "py-spy wrote no profile.", ""]
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        count = int(n)
        total += count
        frames = [f.split(" (")[0] + " (" + f.split(" (")[-1].split(":")[0].split("/")[-1] + ")"
                  for f in stack.split(";")]
        for frame in set(frames):
            inclusive[frame] += count
        own[frames[-1]] += count
    lines = ["## Profile of the engine during dispatch (py-spy, 50 Hz, all threads)", "",
             f"{total:,} samples. Inclusive share (the function or something it calls was on the stack):", "",
             "| function | inclusive | self |", "|---|---:|---:|"]
    for frame, n in inclusive.most_common(top * 2)[:top * 2]:
        lines.append(f"| `{frame}` | {100 * n / total:.1f}% | {100 * own.get(frame, 0) / total:.1f}% |")
    lines += ["", "Top self time:", "", "| function | self |", "|---|---:|"]
    for frame, n in own.most_common(top):
        lines.append(f"| `{frame}` | {100 * n / total:.1f}% |")
    return lines + [""]


def _save(plt: Any, fig: Any, ax: Any, labels: tuple[str, str, str], path: Path) -> Path:
    """Axis labels, title, grid and legend as every burst plot has them; the figure written and closed."""
    xlabel, ylabel, title = labels
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path


def plot(stem: str, config: BurstConfig, due_ms: int, ok: list[Arrival],
         expected: dict[str, tuple[str, int]]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lags = defaultdict(list)
    for a in ok:
        lags[LARGE if a.tenant == LARGE else "small tenants"].append((a.visible_ms - expected[a.occurrence_id][1])
                                                                     / 1000)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, values in lags.items():
        values.sort()
        ax.plot(values, [i / len(values) for i in range(len(values))], label=label)
    lag_plot = _save(plt, fig, ax, ("seen_at - due instant (s)", "fraction of occurrences",
                                    f"{config.name}: lag distribution ({len(ok):,} occurrences)"),
                     RESULTS / f"{stem}-lag.png")

    bin_ms = 1000 if config.window_ms else 100
    seen = Counter((a.visible_ms - due_ms) // bin_ms for a in ok)
    enq = Counter((a.timestamp_ms - due_ms) // bin_ms for a in ok)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for label, counts in (("visible (read_committed)", seen), ("enqueued (record timestamp)", enq)):
        xs = list(range(min(counts, default=0), max(counts, default=0) + 2))
        ax.step([x * bin_ms / 1000 for x in xs], [counts[x] * 1000 / bin_ms for x in xs], where="post", label=label)
    rate_plot = _save(plt, fig, ax, ("seconds after T", "occurrences / s",
                                     f"{config.name}: dispatch rate per {bin_ms} ms"), RESULTS / f"{stem}-rate.png")
    return [lag_plot, rate_plot]
