"""Running staged bursts (the policy is `staging.py`, the decision record ADR 0002): the stage producers,
one per owned partition, and the one stage open at a time, filled between turns and committed at its instant.
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from scheduler.engine import staging, timeline_keys
from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.staging import Stage, StagedPartition
from scheduler.engine.task import SchedulerTask
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.engine.metrics import EngineMetrics

log = logging.getLogger(__name__)


class StageRunner:
    """Lives beside the turns' producer: a stage is begun, filled and committed between turns (no turn's
    transaction is open then), and dropped when a turn would contradict it or its partitions move."""

    def __init__(self, config: EngineConfig, producer_conf: Mapping[str, Any], tasks: dict[int, SchedulerTask],
                 trigger_limits: RateLimits, metrics: EngineMetrics, clock: Callable[[], float]) -> None:
        self.config = config
        self.producer_conf = dict(producer_conf)
        self.tasks = tasks  # the process's tasks, shared: partitions come and go with the group
        self.trigger_limits = trigger_limits
        self.metrics = metrics
        self.clock = clock
        self.stagers: dict[int, TransactionalProducer] = {}
        self.stage: Stage | None = None
        self.rate_per_s = config.stage_rate_per_s
        self._burst_counts: tuple[int, dict[int, int]] | None = None  # (counted at ms, due_ms -> strict entries)

    @property
    def filling(self) -> bool:
        return self.stage is not None and not self.stage.complete

    def forget(self, partitions: list[int]) -> None:
        """Revoked partitions: a stage covering one is dropped, their producers closed."""
        if self.stage is not None and set(partitions) & self.stage.partitions.keys():
            self.drop(f"partitions {partitions} revoked")
        for partition in partitions:
            self.stagers.pop(partition, None)

    def close(self) -> None:
        self.drop("the process is stopping")
        self.stagers.clear()

    def contradicted(self) -> bool:
        return self.stage is not None and any(task.scan.contradicts_stage() for task in self.tasks.values())

    def step(self, now_ms: int) -> None:
        """Between turns (no transaction open on the main producer): start, fill or commit the stage."""
        stage = self.stage
        if stage is None:
            burst = self._next_burst(now_ms)
            if burst is None:
                return
            stage = self._begin(burst, now_ms)
        if now_ms >= stage.due_ms:
            self._commit()
        elif not stage.complete:
            self._fill(stage)

    def _next_burst(self, now_ms: int) -> int | None:
        """The instant of a strict burst to stage now, if any. Every instant within the longest lead is
        counted (not just the next one: a burst often comes after smaller instants of steady traffic),
        again every COUNT_EVERY_MS."""
        if self.config.stage_min <= 0 or not self.tasks:
            return None
        if self._burst_counts is None or now_ms - self._burst_counts[0] >= staging.COUNT_EVERY_MS:
            start = staging.instant_range(now_ms + staging.MARGIN_MS)[1]
            end = staging.instant_range(now_ms + self.config.stage_max_lead_ms)[1]
            counts: Counter[int] = Counter()
            for task in self.tasks.values():
                counts.update(timeline_keys.due_ms_of(key) for key in task.store.keys_from("timeline", start, end))
            self._burst_counts = (now_ms, dict(counts))
        return staging.choose(self._burst_counts[1], now_ms, self.config.stage_min, self.rate_per_s,
                              self.config.stage_max_lead_ms)

    def _conf(self, partition: int) -> dict[str, Any]:
        return {**self.producer_conf,
                "transactional.id": staging.transactional_id(self.config.prefix, partition),
                "transaction.timeout.ms": self.config.stage_max_lead_ms + self.config.transaction_timeout_ms,
                "queue.buffering.max.messages": 2_000_000}

    def _new_stager(self, partition: int) -> TransactionalProducer:
        """Initialising a partition's stage id fences every earlier producer with it and aborts the stage it
        left open (a crashed owner of any instance id, or an abort that failed), which would otherwise hold
        back the readers of the stage's partitions until its transaction timeout."""
        return TransactionalProducer(self._conf(partition))

    def open(self, partitions: list[int]) -> None:
        """Before newly assigned partitions are restored: the stage producers named after them, so that a stage
        the previous owner left open is aborted now, whatever that owner's instance id."""
        with ThreadPoolExecutor(max_workers=max(1, len(partitions))) as pool:
            self.stagers.update(zip(partitions, pool.map(self._new_stager, partitions)))

    def _begin(self, due_ms: int, now_ms: int) -> Stage:
        producer_partition = min(self.tasks)
        if producer_partition not in self.stagers:  # making one after a failed abort failed too
            self.stagers[producer_partition] = self._new_stager(producer_partition)
        self.stagers[producer_partition].begin()
        first, end = staging.instant_range(due_ms)
        stage = self.stage = Stage(due_ms, {n: StagedPartition(first, end) for n in self.tasks}, now_ms,
                                    producer_partition)
        counted = self._burst_counts[1].get(due_ms, 0) if self._burst_counts else 0
        log.info("staging the burst due at %d (%d entries, %.1f s ahead)", due_ms, counted, (due_ms - now_ms) / 1000)
        return stage

    def _fill(self, stage: Stage) -> None:
        stager = self.stagers[stage.producer_partition]
        for partition, share in stage.shares(self.config.stage_chunk).items():
            task = self.tasks[partition]

            def accept(overlap_policy: str, tenant: str, task: SchedulerTask = task) -> bool:
                if not staging.stageable(overlap_policy, task.slots.is_limited(tenant)):
                    return False
                if self.trigger_limits.bucket(tenant).take(1, stage.due_ms) == 0:
                    return False
                stage.tokens[tenant] += 1
                return True

            for entry in task.scan.stage(stage.partitions[partition], share, accept):
                stager.produce(entry.topic, entry.occurrence, entry.schedule_id.encode(), timestamp=stage.due_ms)
        stager.raw.poll(0)
        if stage.complete:
            stage.completed_ms = int(self.clock() * 1000)
            log.info("staged %d occurrences due at %d in %.1f s", stage.count, stage.due_ms,
                     (stage.completed_ms - stage.started_ms) / 1000)

    def _commit(self) -> None:
        stage = self.stage
        assert stage is not None
        started = time.perf_counter()
        try:
            self.stagers[stage.producer_partition].commit(self.config.transaction_timeout_ms / 1000,
                                                           self.config.transaction_timeout_ms / 1000)
        except KafkaException as exc:
            self.drop(f"its commit failed: {exc.args[0]}")
            return
        visible_ms = int(self.clock() * 1000)
        for partition, part in stage.partitions.items():
            self.tasks[partition].scan.staged_sent(part)
        rate = stage.rate_per_s()
        if rate is not None:
            self.rate_per_s = rate
        self.stage = None
        self.metrics.staged(stage.due_ms, visible_ms, stage.count, time.perf_counter() - started)
        log.info("committed the staged burst due at %d: %d occurrences visible %d ms after it", stage.due_ms,
                 stage.count, visible_ms - stage.due_ms)

    def drop(self, reason: str) -> None:
        """Abort the stage: its occurrences are still in the timeline and go the ordinary way."""
        stage, self.stage = self.stage, None
        if stage is None:
            return
        log.warning("dropping the staged burst due at %d (%d occurrences): %s", stage.due_ms, stage.count, reason)
        stager = self.stagers.get(stage.producer_partition)
        try:
            if stager is not None:
                stager.abort(30)
        except KafkaException as exc:  # fenced (the partition's new owner has its id), or no new producer yet
            log.warning("stage producer dropped (%s); the next stage makes one", exc.args[0])
            del self.stagers[stage.producer_partition]
        for tenant, n in stage.tokens.items():
            self.trigger_limits.bucket(tenant).tokens += n
        for partition in stage.partitions:
            task = self.tasks.get(partition)
            if task is not None:
                task.scan.stage_dropped()
        self.metrics.stage_dropped(stage.count)
