"""A staged burst's phase (scheduler/engine/stage_policy.py), explicit and changed only along its transitions.

A stage used to infer where it was from which of its measurements were still `None` (no preparation end yet:
preparing; a transaction start: producing; a produce time: delivered). Those measurements are data for the next
stage's lead and for the logs, and a phase read from them allowed a commit of a stage whose records were not all
delivered, whose entries would then have been taken out of the timeline as sent. Here the phase is its own value,
as the status of a quixstreams partition transaction is: a step that does not fit the phase raises instead of
doing something half-right.

    PREPARING --(every partition scanned, or cut short)--> PREPARED --(its produce window)--> PRODUCING
    PRODUCING --(every record delivered)--> PRODUCED --(its instant, the commit)--> COMMITTED
    PREPARED --(nothing in it can be staged)--> EMPTY
    any phase before COMMITTED --(revoke, contradiction, failure)--> DROPPED

Pure: no Kafka, no clock.
"""
from __future__ import annotations

from enum import Enum


class StagePhase(Enum):
    PREPARING = "preparing"  # scanning the instant's entries into records in memory; no transaction
    PREPARED = "prepared"    # every partition scanned and the unused tokens returned; waiting for the produce window
    PRODUCING = "producing"  # its transaction begun, records produced in slices between turns
    PRODUCED = "produced"    # every record delivered; the transaction waits for the instant to commit
    COMMITTED = "committed"  # visible to read_committed workers; its entries leave the timeline
    DROPPED = "dropped"      # aborted (if it had a transaction): its entries go the ordinary way
    EMPTY = "empty"          # prepared nothing (all of the instant is decided at dispatch): no transaction at all


TRANSITIONS: dict[StagePhase, frozenset[StagePhase]] = {
    StagePhase.PREPARING: frozenset({StagePhase.PREPARED, StagePhase.DROPPED}),
    StagePhase.PREPARED: frozenset({StagePhase.PRODUCING, StagePhase.EMPTY, StagePhase.DROPPED}),
    StagePhase.PRODUCING: frozenset({StagePhase.PRODUCED, StagePhase.DROPPED}),
    StagePhase.PRODUCED: frozenset({StagePhase.COMMITTED, StagePhase.DROPPED}),
    StagePhase.COMMITTED: frozenset(),
    StagePhase.DROPPED: frozenset(),
    StagePhase.EMPTY: frozenset(),
}

TRANSACTION_OPEN = frozenset({StagePhase.PRODUCING, StagePhase.PRODUCED})  # readers of its partitions wait
TERMINAL = frozenset(phase for phase, onward in TRANSITIONS.items() if not onward)


class StageTransitionError(RuntimeError):
    """A step the stage's phase does not allow: an engine bug, never a broker's or a user's condition."""


def advance(current: StagePhase, to: StagePhase) -> StagePhase:
    """`to`, if the stage may go there from `current`."""
    if to not in TRANSITIONS[current]:
        raise StageTransitionError(f"a stage cannot go from {current.value} to {to.value}")
    return to
