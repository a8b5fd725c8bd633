"""Running staged bursts (the policy is `stage_policy.py`, the decision record ADR 0002): the stage producers,
one per owned partition, and the one stage at a time, prepared in memory between turns during its lead,
produced in its produce window and committed at its instant.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import KafkaException

from scheduler.engine import stage_layout, stage_policy, stage_records
from scheduler.engine.burst_count import BurstCounter
from scheduler.engine.config import EngineConfig
from scheduler.engine.fairness import RateLimits
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.stage_layout import TopicLayout
from scheduler.engine.stage_phase import StagePhase
from scheduler.engine.stage_policy import Stage, StagedPartition
from scheduler.engine.task import SchedulerTask
from scheduler.kafka.transactional import TransactionalProducer

log = logging.getLogger(__name__)


class StageRunner:
    """Lives beside the turns' producer: a stage is begun, prepared, produced and committed between turns
    (no turn's transaction is open then), and dropped when a turn would contradict it or its partitions move."""

    def __init__(self, config: EngineConfig, producer_conf: Mapping[str, Any], tasks: Mapping[int, SchedulerTask],
                 trigger_limits: RateLimits, metrics: EngineMetrics, clock: Callable[[], float],
                 partitions: tuple[int, int]) -> None:
        self.config = config
        self.occurrence_partitions, self.schedule_partitions = partitions
        self.producer_conf = dict(producer_conf)
        self.tasks = tasks  # the process's tasks (active_tasks.py), read only: partitions come and go with the group
        self.trigger_limits = trigger_limits
        self.metrics = metrics
        self.clock = clock
        self.stagers: dict[int, TransactionalProducer] = {}
        self.stage: Stage | None = None
        self.rate_per_s = config.stage_rate_per_s
        self.produce_rate_per_s = config.stage_produce_rate_per_s
        self.bursts = BurstCounter(max(1, config.stage_min))
        self._nothing_at: int | None = None  # an instant whose stage found nothing stageable: not staged again
        self._pending = stage_records.Pending([])  # the producing stage's records not yet produced

    def held(self) -> dict[str, TopicLayout]:
        """The layouts of the open stage's topics (`stage_layout`): the turns send those topics' ordinary
        occurrences to the partitions it left free until its commit."""
        stage = self.stage
        return stage.layouts if stage is not None and stage.producing else {}

    @property
    def filling(self) -> bool:
        """Counting bursts, preparing, or producing in slices: the main loop must come back at once."""
        stage = self.stage
        if stage is None:
            return self.bursts.sweeping
        return stage.phase in (StagePhase.PREPARING, StagePhase.PRODUCING)

    @property
    def under_way(self) -> bool:
        """A stage is under way (from its lead to its commit): its instant and its produce window are timed
        to the turn, so the loop keeps no turn interval meanwhile."""
        return self.stage is not None

    def forget(self, partitions: list[int]) -> None:
        """Revoked partitions: a stage covering one is dropped, their producers closed."""
        self.bursts.reset()
        if self.stage is not None and set(partitions) & self.stage.partitions.keys():
            self.drop(f"partitions {partitions} revoked")
        self.close_producers(partitions)

    def close_producers(self, partitions: list[int]) -> None:
        """The stage producers of partitions this process no longer owns: the next owner initialises their ids."""
        for partition in partitions:
            self.stagers.pop(partition, None)

    def close(self) -> None:
        self.bursts.reset()
        self.drop("the process is stopping")
        self.stagers.clear()

    def contradicted(self) -> bool:
        return self.stage is not None and any(task.scan.contradicts_stage() for task in self.tasks.values())

    def step(self, now_ms: int) -> None:
        """Between turns (no transaction open on the main producer): the one place the turn moves the stage on,
        by its phase (stage_phase.py) - start one, prepare it, produce it in its window, commit it at its instant."""
        stage = self.stage
        if stage is None:
            burst = self._next_burst(now_ms)
            if burst is None:
                return
            stage = self._begin(burst, now_ms)
        phase = stage.phase
        if phase in (StagePhase.PREPARING, StagePhase.PREPARED):
            if stage_policy.should_produce(stage.due_ms, stage.window_count(), now_ms, self.produce_rate_per_s):
                self._produce(stage)
            elif phase is StagePhase.PREPARING:
                self._prepare(stage)
        elif now_ms >= stage.due_ms:
            self._commit(stage)
        elif phase is StagePhase.PRODUCING:
            self._produce_slice(stage, time.perf_counter() + stage_policy.PRODUCE_SLICE_S)

    def _next_burst(self, now_ms: int) -> int | None:
        """The instant of a strict burst to stage now, if any. Every instant within the longest lead is
        counted (not just the next one: a burst often comes after smaller instants of steady traffic),
        again every COUNT_EVERY_MS, a slice between two turns (burst_count.py)."""
        if self.config.stage_min <= 0 or not self.tasks:
            return None
        self.bursts.step((task.store for task in self.tasks.values()), now_ms, self.config.stage_max_lead_ms)
        counts = {due: n for due, n in self.bursts.counts.items() if due != self._nothing_at}
        return stage_policy.choose(counts, now_ms, self.config.stage_min, self.rate_per_s,
                                   self.config.stage_max_lead_ms, self.produce_rate_per_s)

    def _conf(self, partition: int) -> dict[str, Any]:
        return {**self.producer_conf,
                "transactional.id": stage_policy.transactional_id(self.config.prefix, partition),
                "transaction.timeout.ms": stage_policy.PRODUCE_MAX_MS + self.config.transaction_timeout_ms,
                "queue.buffering.max.messages": 2_000_000}

    def _new_stager(self, partition: int) -> TransactionalProducer:
        """Initialising a partition's stage id fences every earlier producer with it and aborts the stage it
        left open (a crashed owner of any instance id, or an abort that failed), which would otherwise hold
        back the readers of the stage's partitions until its transaction timeout."""
        return TransactionalProducer(self._conf(partition), settle=True)

    def open(self, partitions: list[int]) -> None:
        """Before newly assigned partitions are restored: the stage producers named after them, so that a stage
        the previous owner left open is aborted now, whatever that owner's instance id."""
        with ThreadPoolExecutor(max_workers=max(1, len(partitions))) as pool:
            self.stagers.update(zip(partitions, pool.map(self._new_stager, partitions), strict=True))

    def _begin(self, due_ms: int, now_ms: int) -> Stage:
        """A stage in memory only: no transaction until its produce window."""
        first, end = stage_policy.instant_range(due_ms)
        counted = self.bursts.counts.get(due_ms, 0)
        stage = self.stage = Stage(due_ms, {n: StagedPartition(first, end) for n in self.tasks}, now_ms,
                                    min(self.tasks), expected=counted)
        log.info("staging the burst due at %d (%d entries, %.1f s ahead)", due_ms, counted, (due_ms - now_ms) / 1000)
        return stage

    def _refill(self, stage: Stage, task: SchedulerTask) -> Callable[[bytes], int]:
        """A tenant's next block of tokens as of the instant, or NEVER for a tenant whose entries are decided
        at dispatch (running slots) or that has no token left at the instant."""
        def refill(raw_tenant: bytes) -> int:
            tenant = raw_tenant.decode()
            if not stage_policy.stageable("ALLOW", task.slots.is_limited(tenant)):
                return stage_records.NEVER
            granted = self.trigger_limits.bucket(tenant).take(stage_policy.TOKEN_BLOCK, stage.due_ms)
            stage.tokens[tenant] += granted
            return granted or stage_records.NEVER
        return refill

    def _prepare(self, stage: Stage) -> None:
        started = time.perf_counter()
        for partition, share in stage.shares(self.config.stage_chunk).items():
            task = self.tasks[partition]
            task.scan.stage(stage.partitions[partition], share, stage.left, self._refill(stage, task),
                       stage.prepared.setdefault(partition, {}))
        stage.prepare_s += time.perf_counter() - started
        if stage.scanned:
            self._prepared(stage)

    def _prepared(self, stage: Stage) -> None:
        stage.advance(StagePhase.PREPARED)
        stage.completed_ms = int(self.clock() * 1000)
        for tenant, n in stage_policy.give_back(stage.left).items():
            self.trigger_limits.bucket(tenant).tokens += n
            stage.tokens[tenant] -= n
        stage.left.clear()
        log.info("staged %d occurrences due at %d in %.1f s (prepared in memory, %.3f s of work)", stage.count,
                 stage.due_ms, (stage.completed_ms - stage.started_ms) / 1000, stage.prepare_s)

    def _produce(self, stage: Stage) -> None:
        """Begin the stage's transaction and produce everything prepared, largest partitions first; from here
        on its partitions' readers wait for the commit at the instant."""
        if stage.phase is StagePhase.PREPARING:
            stage.cut_short()
            self._prepared(stage)
        if stage.count == 0:  # all of it is decided at dispatch: no transaction for nothing
            log.info("nothing of the burst due at %d can be staged", stage.due_ms)
            stage.advance(StagePhase.EMPTY)
            self.stage, self._nothing_at = None, stage.due_ms
            for task in self.tasks.values():
                task.scan.stage_dropped()
            return
        partition = stage.producer_partition
        if partition not in self.stagers:  # making one after a failed abort failed too
            self.stagers[partition] = self._new_stager(partition)
        stager = self.stagers[partition]
        started = time.perf_counter()
        merged = stage_records.by_topic(stage.prepared)
        stage.prepared = {}
        mine = stage_layout.writable(self.occurrence_partitions, self.schedule_partitions, stage.partitions)
        if mine is not None:
            stage.layouts = {topic: stage_layout.plan(topic, len(values), mine, self.occurrence_partitions)
                             for topic, (values, _) in merged.items()}
        stage.produced_ms = int(self.clock() * 1000)
        stager.begin()
        stage.advance(StagePhase.PRODUCING)
        self._pending = stage_records.Pending(stage_records.produce_order(merged, stage.layouts))
        stage.produce_work_s = time.perf_counter() - started
        self._produce_slice(stage, time.perf_counter() + stage_policy.PRODUCE_SLICE_S)

    def _produce_slice(self, stage: Stage, until: float, final: bool = False) -> None:
        """Produce the stage's next slice of records (`final`: all the rest, and wait for their delivery);
        once all are delivered, its produce time is known."""
        stager = self.stagers[stage.producer_partition]
        started = time.perf_counter()
        stage_records.produce_some(stager.raw.produce, stager.raw.poll, self._pending, stage.due_ms, until,
                                   time.perf_counter)
        if final:
            try:
                stager.flush(self.config.transaction_timeout_ms / 1000)
            except KafkaException as exc:
                self.drop(f"its records were not delivered: {exc.args[0]}")
                return
        elif self._pending.done:
            stager.raw.poll(0)
        stage.produce_work_s += time.perf_counter() - started
        if self._pending.done and len(stager.raw) == 0:
            stage.advance(StagePhase.PRODUCED)
            stage.produce_s = self.clock() - (stage.produced_ms or 0) / 1000
            log.info("produced the stage due at %d: %d occurrences in %.2f s, %d ms before it", stage.due_ms,
                     stage.count, stage.produce_s, stage.due_ms - int(self.clock() * 1000))

    def _commit(self, stage: Stage) -> None:
        """At its instant; a stage still producing produces the rest first, late rather than never."""
        if stage.phase is StagePhase.PRODUCING:
            self._produce_slice(stage, float("inf"), final=True)
            if self.stage is not stage:
                return
        started = time.perf_counter()
        try:
            self.stagers[stage.producer_partition].commit(self.config.transaction_timeout_ms / 1000,
                                                           self.config.transaction_timeout_ms / 1000)
        except KafkaException as exc:
            self.drop(f"its commit failed: {exc.args[0]}")
            return
        commit_s = time.perf_counter() - started
        stage.advance(StagePhase.COMMITTED)
        visible_ms = int(self.clock() * 1000)
        for partition, part in stage.partitions.items():
            self.tasks[partition].scan.staged_sent(part)
        for measured, attribute in ((stage.rate_per_s(), "rate_per_s"),
                                    (stage.produce_rate_per_s(), "produce_rate_per_s")):
            if measured is not None:
                setattr(self, attribute, measured)
        self.stage, self._pending = None, stage_records.Pending([])
        self.metrics.staged(stage.due_ms, visible_ms, stage.count, commit_s)
        work_s = stage.prepare_s + stage.produce_work_s + commit_s
        log.info("committed the staged burst due at %d: %d occurrences visible %d ms after it; its transaction "
                 "was open %d ms; work: prepare %.3f s, produce %.3f s, commit %.3f s: %.0f occurrences/s",
                 stage.due_ms, stage.count, visible_ms - stage.due_ms, visible_ms - (stage.produced_ms or visible_ms),
                 stage.prepare_s, stage.produce_work_s, commit_s, stage.count / max(work_s, 0.001))

    def drop(self, reason: str) -> None:
        """Abort the stage: its occurrences are still in the timeline and go the ordinary way."""
        stage, self.stage = self.stage, None
        self._pending = stage_records.Pending([])
        if stage is None:
            return
        log.warning("dropping the staged burst due at %d (%d occurrences): %s", stage.due_ms, stage.count, reason)
        stager = self.stagers.get(stage.producer_partition) if stage.producing else None
        stage.advance(StagePhase.DROPPED)
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
