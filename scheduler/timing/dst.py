"""The DST contract: how one local wall-clock time becomes zero, one or two UTC instants.

Default (per the seeds): a wall time inside a spring-forward gap is skipped and a
repeated wall time fires once, at its first occurrence. Options per schedule:
dst_gap = skip | shift (shift: the first instant after the gap) and
dst_overlap = first | last | both. Instants chosen or moved by a rule carry the
rule's name so the occurrence can be audited.
"""
from __future__ import annotations

GAP_OPTIONS = ("skip", "shift")
OVERLAP_OPTIONS = ("first", "last", "both")

GAP_SHIFTED = "gap_shifted"
OVERLAP_RULES = {"first": "overlap_first", "last": "overlap_last", "both": "overlap_both"}


def wall_instants(wall: int, offsets: list[int], times: list[int]) -> list[int]:
    """Every instant u with u + offset(u) == wall, ascending.

    `offsets`/`times` describe a transition window covering wall ± MAX_OFFSET
    (see ZoneRules.window): offsets[i] is in force on [times[i-1], times[i]).
    """
    found = []
    last = len(times)
    for i, offset in enumerate(offsets):
        u = wall - offset
        if (i == 0 or u >= times[i - 1]) and (i == last or u < times[i]):
            found.append(u)
    return found


def gap_end(wall: int, offsets: list[int], times: list[int]) -> int:
    """The first instant after the gap containing `wall` (its transition instant)."""
    for i, t in enumerate(times):
        if t + offsets[i] <= wall < t + offsets[i + 1]:
            return t
    raise ValueError("wall time is not inside a gap of this window")


def resolve_wall(wall: int, offsets: list[int], times: list[int], gap: str,
                 overlap: str) -> list[tuple[int, str | None]]:
    """Apply the DST contract to one wall time: [(instant, dst_rule), ...] ascending."""
    instants = wall_instants(wall, offsets, times)
    if len(instants) == 1:
        return [(instants[0], None)]
    if not instants:
        return [(gap_end(wall, offsets, times), GAP_SHIFTED)] if gap == "shift" else []
    rule = OVERLAP_RULES[overlap]
    if overlap == "first":
        return [(instants[0], rule)]
    if overlap == "last":
        return [(instants[-1], rule)]
    return [(u, rule) for u in instants]
