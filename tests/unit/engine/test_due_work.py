"""The turn's poll wait (scheduler/engine/due_work.py): until the next due entry, paced by the turn interval,
never waiting while a restore or a filling stage needs the loop, the idle poll when limits hold everything."""
from __future__ import annotations

from scheduler.engine.due_work import Pace, poll_timeout_s

NOW = 1_000_000


def pace(**facts) -> Pace:
    return Pace(**{"restoring": False, "held_up": False, "stage_filling": False, "stage_under_way": False,
                   "turn_began_ms": 0, "idle_poll_ms": 50, "turn_interval_ms": 100, **facts})


def test_waits_until_the_next_due_entry_at_most_the_idle_poll():
    assert poll_timeout_s(NOW, lambda: NOW + 20, pace()) == 0.02
    assert poll_timeout_s(NOW, lambda: NOW + 5_000, pace()) == 0.05
    assert poll_timeout_s(NOW, lambda: None, pace()) == 0.05
    assert poll_timeout_s(NOW, lambda: NOW - 10, pace()) == 0.0


def test_a_turn_interval_after_the_last_turn_began_unless_a_stage_keeps_its_own_timing():
    assert poll_timeout_s(NOW, lambda: NOW - 10, pace(turn_began_ms=NOW - 30)) == 0.07
    assert poll_timeout_s(NOW, lambda: NOW - 10, pace(turn_began_ms=NOW - 30, stage_under_way=True)) == 0.0


def test_restores_and_filling_stages_do_not_wait_and_held_up_work_waits_the_idle_poll():
    def unasked() -> int:
        raise AssertionError("the next due entry was read though it could not count")

    assert poll_timeout_s(NOW, unasked, pace(restoring=True)) == 0.0
    assert poll_timeout_s(NOW, unasked, pace(stage_filling=True)) == 0.0
    assert poll_timeout_s(NOW, unasked, pace(held_up=True, turn_began_ms=NOW)) == 0.05
