"""Faults while a staged burst is open (docs/decisions/0002-staged-bursts.md), with real scheduler processes and
a real broker: the stage's partitions move to another process, or the broker restarts under it."""
from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_harness import (
    BURST_TENANTS,
    STAGE_ARGS,
    Received,
    SchedulerProcess,
    TopicReader,
    create_burst,
    ensure_layout,
    occurrence_topics,
    read_until_all,
    wait_for_log,
)

from scheduler.broker.local import LocalBroker, free_port


def check_arrivals(received: list[Received], counts: Counter[str], expected: dict[str, str], due_ms: int,
                   bound_ms: int, *processes: SchedulerProcess) -> None:
    """Every id came, none that was not scheduled, none before the instant, all within `bound_ms` after it."""
    duplicates = sum(n - 1 for n in counts.values())
    logs = "\n".join(p.log_tail(30) for p in processes)
    missing = expected.keys() - counts.keys()
    assert not missing, f"{len(missing)} of {len(expected)} occurrences lost ({duplicates} duplicates)\n{logs}"
    assert counts.keys() == expected.keys(), "an occurrence id that was never scheduled was delivered"
    assert min(r.seen_ms for r in received) >= due_ms, "seen before the instant"
    assert min(r.timestamp_ms for r in received) >= due_ms, "a record timestamped before the instant"
    late_ms = max(r.seen_ms for r in received) - due_ms
    assert late_ms < bound_ms, f"the last occurrence came {late_ms} ms after the instant ({duplicates} duplicates)"


def test_a_stage_whose_partitions_move_is_dropped_and_the_new_owner_sends_it(kafka_bootstrap: str, unique_prefix: str,
                                                                            tmp_path: Path) -> None:
    ensure_layout(kafka_bootstrap, unique_prefix, BURST_TENANTS)
    # A first guess of 100 staged/s makes the lead of 1,450 entries about 25 s (not 3): B joins while it is open.
    slow_first_guess = (*STAGE_ARGS, "--stage-rate", "100")
    a = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "a", "a", slow_first_guess).start()
    b = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "b", "b", slow_first_guess)
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, BURST_TENANTS), "Occurrence")
    try:
        due_ms = (math.ceil(time.time()) + 25) * 1000
        expected = create_burst(kafka_bootstrap, unique_prefix, due_ms)
        wait_for_log(a, "staged 1450 occurrences", due_ms / 1000)
        b.start()
        dropped = f"dropping the staged burst due at {due_ms} (1450 occurrences): partitions"
        wait_for_log(a, dropped, due_ms / 1000 + 10)
        dropped_ms = int(time.time() * 1000)
        counts = read_until_all(reader, expected, due_ms + 30_000)
        assert b.owned_partitions(), "B never took partitions over:\n" + b.log_tail()
    finally:
        reader.close()
        for process in (a, b):
            if process.alive():
                process.terminate()
    check_arrivals(reader.received, counts, expected, due_ms, 30_000, a, b)
    duplicates = {oid: n for oid, n in counts.items() if n > 1}
    assert not duplicates, f"{len(duplicates)} occurrences came twice: the dropped stage must stay invisible"
    print(f"\nstage dropped about {due_ms - dropped_ms} ms before the instant; the last occurrence came "
          f"{max(r.seen_ms for r in reader.received) - due_ms} ms after it")


@pytest.fixture
def private_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A broker for one test alone: stopping it must not disturb the tests that share the session broker."""
    broker = LocalBroker(tmp_path / "kafka", port=free_port(), controller_port=free_port())
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()


@pytest.mark.integration
def test_a_broker_restart_with_a_stage_open_loses_nothing(private_broker: LocalBroker, unique_prefix: str,
                                                          tmp_path: Path) -> None:
    bootstrap = private_broker.bootstrap
    ensure_layout(bootstrap, unique_prefix, BURST_TENANTS)
    a = SchedulerProcess(bootstrap, unique_prefix, tmp_path / "state", "a", STAGE_ARGS).start()
    reader = TopicReader(bootstrap, occurrence_topics(unique_prefix, BURST_TENANTS), "Occurrence")
    try:
        due_ms = (math.ceil(time.time()) + 25) * 1000
        expected = create_burst(bootstrap, unique_prefix, due_ms)
        wait_for_log(a, "staged 1450 occurrences", due_ms / 1000)
        stopping_ms = int(time.time() * 1000)
        private_broker.stop()
        private_broker.start()
        restarted_ms = int(time.time() * 1000)
        counts = read_until_all(reader, expected, due_ms + 60_000)
        assert a.alive(), "the scheduler did not survive the broker restart:\n" + a.log_tail()
    finally:
        reader.close()
        if a.alive():
            a.terminate()
    assert stopping_ms < due_ms, "the broker was stopped after the instant, not while the stage was open"
    check_arrivals(reader.received, counts, expected, due_ms, 60_000, a)
    committed = f"committed the staged burst due at {due_ms}" in a.log_tail(10_000)
    print(f"\nbroker stopped {due_ms - stopping_ms} ms before the instant, back {restarted_ms - due_ms} ms after it;"
          f" stage {'committed' if committed else 'dropped'}; duplicates: {sum(n - 1 for n in counts.values())}")
