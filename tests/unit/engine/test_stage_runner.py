"""StageRunner: a strict burst prepared during its lead, produced in its window, committed at its instant.

Proves what scheduler/engine/stage_runner.py promises, with a real task over RocksDB (tmp_path) and a scripted
transactional producer in place of the broker's: no transaction is begun before the produce window; the
records produced are the burst's occurrences stamped with the instant; the commit at the instant takes the
staged entries out of ordinary dispatch; a revoke or a failed commit aborts the stage, gives its tokens back
and leaves every entry to ordinary dispatch; a stage producer whose abort failed is replaced; a stage producer
is opened per partition under that partition's transactional id. Time is the `now_ms` each step is given.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import task_builder
from confluent_kafka import KafkaError, KafkaException
from prometheus_client import CollectorRegistry

from scheduler.engine import stage_runner
from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.stage_phase import StagePhase
from scheduler.engine.stage_runner import StageRunner
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import DISPATCH, LocalEntry, occurrence_key

T = 1_800_000_000_000
BURST = 5
RATE = 1_000.0  # the tenant's trigger rate: a full bucket holds this many tokens


class RawProducer:
    """The confluent_kafka Producer under a stage producer: records kept, each delivered at once."""

    def __init__(self) -> None:
        self.records: list[tuple[str, bytes, bytes, int]] = []  # topic, key, value, timestamp
        self.in_flight = 0  # records produced and not delivered yet
        self.delivered_at_flush = False  # a slow broker: nothing is delivered before a flush

    def produce(self, topic: str, value: bytes, key: bytes, partition: int, callback: object, on_delivery: object,
                timestamp: int) -> None:
        self.records.append((topic, key, value, timestamp))
        self.in_flight += self.delivered_at_flush

    def poll(self, timeout: float) -> int:
        return 0

    def __len__(self) -> int:
        return self.in_flight


@dataclass
class ScriptedStager:
    """A TransactionalProducer's calls, recorded; `fail` names the calls that raise as a fenced producer's do."""

    conf: dict[str, Any]
    settle: bool
    raw: RawProducer = field(default_factory=RawProducer)
    calls: list[str] = field(default_factory=list)
    fail: set[str] = field(default_factory=set)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if name in self.fail:
            raise KafkaException(KafkaError(KafkaError._FENCED, f"{name} fenced"))

    def begin(self) -> None:
        self._call("begin")

    def flush(self, timeout_s: float) -> None:
        self._call("flush")
        self.raw.in_flight = 0

    def commit(self, timeout_s: float, deadline_s: float) -> None:
        self._call("commit")

    def abort(self, timeout_s: float) -> None:
        self._call("abort")


@dataclass
class Rig:
    runner: StageRunner
    task: SchedulerTask
    limits: RateLimits
    registry: CollectorRegistry
    made: list[ScriptedStager]
    keys: list[bytes]

    def step_until(self, now_ms: int, done: str, rounds: int = 50) -> None:
        """Step at `now_ms` until `done` holds: 'prepared' or 'producing' (a sweep and a prepare take slices)."""
        for _ in range(rounds):
            stage = self.runner.stage
            if stage is not None and (stage.scanned if done == "prepared" else stage.producing):
                return
            self.runner.step(now_ms)
        raise AssertionError(f"the stage never got {done}")

    def due_again(self) -> list[bytes]:
        return [key for key, _ in self.task.scan.due(DISPATCH, T + 5)]

    def tokens(self) -> float:
        return self.limits.bucket("acme").tokens


@pytest.fixture
def rig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rig]:
    made: list[ScriptedStager] = []

    def producer(conf: dict[str, Any], settle: bool = False) -> ScriptedStager:
        made.append(ScriptedStager(conf, settle))
        return made[-1]

    monkeypatch.setattr(stage_runner, "TransactionalProducer", producer)
    task = task_builder.make_task(tmp_path / "p0", horizon_ms=0)
    keys = [occurrence_key(DISPATCH, T, f"s{n}", T) for n in range(BURST)]
    entries = {key: LocalEntry("acme", f"s{n}", "occ.acme", f"oid-{n}", b"body-%d" % n).pack()
               for n, key in enumerate(keys)}
    task.store.write({"timeline": entries}, {})
    task.committed({})
    config = EngineConfig("unused:9092", "pfx", tmp_path, "i-1", stage_min=3, stage_chunk=2)
    registry = CollectorRegistry()
    limits = RateLimits(lambda tenant: RATE)
    runner = StageRunner(config, {"bootstrap.servers": "unused:9092"}, {0: task}, limits, EngineMetrics(registry),
                         lambda: T / 1000, (1, 1))
    runner.open([0])
    yield Rig(runner, task, limits, registry, made, keys)
    runner.close()
    task.store.close()


def test_a_stage_producer_is_opened_per_partition_under_its_own_transactional_id(rig: Rig) -> None:
    rig.runner.open([3, 5])
    ids = {p: stager.conf["transactional.id"] for p, stager in rig.runner.stagers.items()}  # type: ignore[attr-defined]
    assert ids == {0: "pfx.scheduler.stage.p0", 3: "pfx.scheduler.stage.p3", 5: "pfx.scheduler.stage.p5"}
    assert all(stager.settle for stager in rig.made)


def test_a_burst_is_prepared_in_its_lead_with_no_transaction_open_until_its_window(rig: Rig) -> None:
    rig.step_until(T - 3000, "prepared")
    stage = rig.runner.stage
    assert stage is not None and stage.count == BURST and not stage.producing and stage.phase is StagePhase.PREPARED
    assert rig.made[0].calls == [] and rig.runner.held() == {}
    assert rig.tokens() == RATE - BURST  # a block taken of the full bucket, what it did not use given back
    rig.runner.step(T - 2000)  # still before the window
    assert rig.made[0].calls == []


def test_the_burst_is_produced_in_its_window_and_committed_at_its_instant(rig: Rig) -> None:
    rig.step_until(T - 3000, "prepared")
    rig.step_until(T - 400, "producing")
    stager = rig.made[0]
    assert stager.calls == ["begin"]
    assert sorted(stager.raw.records) == sorted(("occ.acme", f"s{n}".encode(), b"body-%d" % n, T)
                                                for n in range(BURST))
    assert set(rig.runner.held()) == {"occ.acme"}
    stage = rig.runner.stage
    assert stage is not None and stage.phase is StagePhase.PRODUCED  # every record delivered at once here
    rig.runner.step(T - 1)
    assert stager.calls == ["begin"]  # not before the instant
    rig.runner.step(T)
    assert stager.calls == ["begin", "commit"] and rig.runner.stage is None and stage.phase is StagePhase.COMMITTED
    assert rig.due_again() == []  # sent by the stage: not dispatched the ordinary way too
    assert rig.registry.get_sample_value("scheduler_staged_occurrences_total", {"outcome": "committed"}) == BURST


def test_a_revoke_while_producing_aborts_the_stage_and_leaves_every_entry_to_ordinary_dispatch(rig: Rig) -> None:
    rig.step_until(T - 3000, "prepared")
    rig.step_until(T - 400, "producing")
    stage = rig.runner.stage
    rig.runner.forget([0])
    assert rig.made[0].calls == ["begin", "abort"] and rig.runner.stage is None and rig.runner.stagers == {}
    assert stage is not None and stage.phase is StagePhase.DROPPED
    assert rig.due_again() == rig.keys
    assert rig.tokens() == RATE  # the stage's tokens given back
    assert rig.registry.get_sample_value("scheduler_staged_occurrences_total", {"outcome": "dropped"}) == BURST


def test_a_failed_commit_drops_the_stage_and_a_failed_abort_makes_the_next_stage_a_new_producer(rig: Rig) -> None:
    rig.made[0].fail = {"commit", "abort"}
    rig.step_until(T - 3000, "prepared")
    rig.step_until(T - 400, "producing")
    rig.runner.step(T)
    assert rig.made[0].calls == ["begin", "commit", "abort"] and rig.runner.stage is None
    assert rig.runner.stagers == {} and rig.due_again() == rig.keys
    rig.runner.bursts.counted_ms = None  # count again at once rather than COUNT_EVERY_MS later
    later = T + 10_000
    for n, key in enumerate(rig.keys):
        rig.task.store.write({"timeline": {key: None, occurrence_key(DISPATCH, later, f"s{n}", later):
                                           LocalEntry("acme", f"s{n}", "occ.acme", f"o{n}", b"b").pack()}}, {})
    rig.step_until(later - 3000, "prepared")
    rig.step_until(later - 400, "producing")
    assert len(rig.made) == 2 and rig.made[1].calls == ["begin"]
    assert rig.made[1].conf["transactional.id"] == "pfx.scheduler.stage.p0"


def test_a_burst_smaller_than_the_minimum_is_left_to_ordinary_dispatch(rig: Rig) -> None:
    rig.runner.config.stage_min = BURST + 1
    rig.runner.bursts.minimum = BURST + 1
    for _ in range(10):
        rig.runner.step(T - 3000)
    assert rig.runner.stage is None and rig.made[0].calls == []


def test_a_stage_still_producing_at_its_instant_produces_the_rest_then_commits(rig: Rig) -> None:
    rig.made[0].raw.delivered_at_flush = True
    rig.step_until(T - 3000, "prepared")
    rig.step_until(T - 400, "producing")
    stage = rig.runner.stage
    assert stage is not None and stage.phase is StagePhase.PRODUCING
    rig.runner.step(T - 200)
    assert stage.phase is StagePhase.PRODUCING and rig.made[0].calls == ["begin"]
    rig.runner.step(T)
    assert rig.made[0].calls == ["begin", "flush", "commit"] and stage.phase is StagePhase.COMMITTED
    assert len(rig.made[0].raw.records) == BURST and rig.due_again() == []


def test_a_stage_whose_every_entry_is_decided_at_dispatch_ends_empty_with_no_transaction(rig: Rig) -> None:
    rig.task.slots.is_limited = lambda tenant: True  # type: ignore[method-assign]  # a running-slot quota
    rig.step_until(T - 3000, "prepared")
    stage = rig.runner.stage
    assert stage is not None and stage.count == 0
    rig.runner.step(T - 400)
    assert rig.runner.stage is None and stage.phase is StagePhase.EMPTY and rig.made[0].calls == []
    assert rig.due_again() == rig.keys
