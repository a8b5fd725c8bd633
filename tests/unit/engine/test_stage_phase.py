"""A stage's phases (scheduler/engine/stage_phase.py): the transitions the stager takes are allowed, every
other raises, and the terminal phases lead nowhere."""
from __future__ import annotations

import itertools

import pytest

from scheduler.engine.stage_phase import TERMINAL, TRANSACTION_OPEN, StagePhase, StageTransitionError, advance

P = StagePhase
ALLOWED = {
    (P.PREPARING, P.PREPARED), (P.PREPARING, P.DROPPED),
    (P.PREPARED, P.PRODUCING), (P.PREPARED, P.EMPTY), (P.PREPARED, P.DROPPED),
    (P.PRODUCING, P.PRODUCED), (P.PRODUCING, P.DROPPED),
    (P.PRODUCED, P.COMMITTED), (P.PRODUCED, P.DROPPED),
}


@pytest.mark.parametrize(("current", "to"), sorted(itertools.product(P, P), key=lambda pair: (pair[0].value,
                                                                                                pair[1].value)))
def test_every_pair_of_phases_is_allowed_exactly_when_listed(current: StagePhase, to: StagePhase) -> None:
    if (current, to) in ALLOWED:
        assert advance(current, to) is to
    else:
        with pytest.raises(StageTransitionError, match=f"from {current.value} to {to.value}"):
            advance(current, to)


def test_a_committed_dropped_or_empty_stage_is_over_and_only_a_begun_one_holds_readers_back() -> None:
    assert TERMINAL == {P.COMMITTED, P.DROPPED, P.EMPTY}
    assert TRANSACTION_OPEN == {P.PRODUCING, P.PRODUCED}


def test_a_commit_is_reached_only_through_every_record_delivered() -> None:
    phase = P.PREPARING
    for to in (P.PREPARED, P.PRODUCING):
        phase = advance(phase, to)
    with pytest.raises(StageTransitionError):
        advance(phase, P.COMMITTED)
    assert advance(advance(phase, P.PRODUCED), P.COMMITTED) is P.COMMITTED
