"""The health decisions, from timestamps and counts alone."""
from __future__ import annotations

from scheduler.health.probes import Probe, alive, scheduler_ready, views_ready, worker_alive, worker_ready

LIVE = Probe(True, "ok")
DEAD = Probe(False, "the loop has not turned for 61.0s (limit 60s)")


def test_alive_while_the_loop_turned_within_the_limit() -> None:
    assert alive(100.0, 159.0, 60).ok
    stuck = alive(100.0, 161.0, 60)
    assert not stuck.ok and stuck.reason == "the loop has not turned for 61.0s (limit 60s)"


def test_a_running_handler_keeps_a_worker_alive_up_to_max_poll_interval() -> None:
    assert worker_alive(0.0, 10.0, 200.0, 60, 300).ok  # loop silent for 200 s, handler running 190 s
    overrun = worker_alive(0.0, 10.0, 400.0, 60, 300)
    assert not overrun.ok and "max.poll.interval" in overrun.reason
    assert not worker_alive(0.0, None, 61.0, 60, 300).ok  # no handler: the loop itself must turn


def test_scheduler_ready_only_with_partitions_all_restored() -> None:
    assert scheduler_ready(LIVE, owned=4, restoring=0) == Probe(True, "4 partitions owned and dispatching")
    assert scheduler_ready(LIVE, owned=4, restoring=1) == Probe(False, "1 of its partitions still restoring")
    assert scheduler_ready(LIVE, owned=0, restoring=0) == Probe(False, "no partition assigned")
    assert scheduler_ready(DEAD, owned=4, restoring=0) == DEAD  # a stuck loop dispatches nothing


def test_worker_ready_once_assigned_and_alive() -> None:
    assert worker_ready(LIVE, 2).ok
    assert worker_ready(LIVE, 0) == Probe(False, "no partition assigned")
    assert worker_ready(LIVE, None).ok  # share group: no partitions to wait for
    assert worker_ready(DEAD, 2) == DEAD


def test_views_ready_names_the_views_behind() -> None:
    assert views_ready([]).ok
    assert views_ready(["t.b", "t.a"]) == Probe(False, "views not caught up: t.a, t.b")
