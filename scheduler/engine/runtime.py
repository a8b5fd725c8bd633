"""One scheduler process: a consumer-group member that runs a task per assigned partition.

Kafka does the sharding and failover (the consumer group) and the outbox (one
transactional producer per process, fenced through the group metadata,
KIP-447). Each loop turn is one transaction holding the command results, the
dispatched occurrences, the changelog changes and the consumed offsets; the
local RocksDB is written only after the commit (quixstreams' order).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from scheduler.engine import dispatch_lane, due_work
from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.admission_handler import Admissions
from scheduler.engine.assignment import Assignment
from scheduler.engine.config import (
    EngineConfig,
    consumer_conf,
    producer_conf,
    task_topics,
)
from scheduler.engine.metrics import EngineMetrics
from scheduler.engine.occurrence_timeline import planning_lead_ms
from scheduler.engine.outputs import produce_outputs
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.previous_owner import PreviousOwners, owner_tag
from scheduler.engine.process_tenants import ProcessTenants
from scheduler.engine.restore import RestoreReader
from scheduler.engine.stage_runner import StageRunner
from scheduler.engine.standbys import Standbys
from scheduler.engine.task import SchedulerTask
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH
from scheduler.kafka.admin import ensure_topics
from scheduler.kafka.clients import connection, is_noise, settled
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.wire.codec import Codec
from scheduler.wire.partitioning import partition_for
from scheduler.wire.topology import Topology

log = logging.getLogger(__name__)

SLOW_TURN_S = 1.0  # a turn longer than this is logged with where its time went
TURN_PHASES = ("inputs", "dispatch", "materialize", "produce", "commit")
# A group coordinator moving after a broker's death answers within seconds; a turn waits no longer than
# this for it (then the turn is aborted and read again, scheduler/kafka/transactional.py).
SEND_OFFSETS_TIMEOUT_S = 10.0


class SchedulerProcess:
    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.time,
                 metrics: EngineMetrics | None = None) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics if metrics is not None else EngineMetrics()
        self.topology = Topology.load()
        self.codec = Codec.default()
        prefix = config.prefix
        self.topics = task_topics(self.topology, prefix)
        self.tasks = ActiveTasks()
        self._stop = threading.Event()
        self._held_up = False  # the last turn had due work and could send none of it
        self._plan_from = 0  # the partition (by position) that plans first in the next turn
        self._turn_began_ms = 0  # when the last turn with work began (the turn interval counts from it)
        common = connection(config.bootstrap_servers, config.client_config)
        self._common = common
        self._admin = AdminClient({**common})  # the fencing of dead previous owners
        self.tenants = ProcessTenants(config, self.topology, common)
        self.trigger_limits = self.tenants.trigger_limits
        self.catch_up_limits = self.tenants.catch_up_limits
        self._producer_conf = producer_conf(common, config)
        self._transactional_id: str = self._producer_conf["transactional.id"]
        group = self.topology.tasks["scheduler"].consumer_group(prefix)
        self._consumer_conf = consumer_conf(common, group, self._transactional_id)
        self.consumer = Consumer(self._consumer_conf)
        self.producer: TransactionalProducer | None = None  # the turns' producer, made when the process runs
        self.stages = StageRunner(config, self._producer_conf, self.tasks, self.trigger_limits, self.metrics, clock,
                                  (self.topology.topics["occurrences"].partitions, self.topology.schedule_partitions))
        self.standbys = Standbys(config.instance_dir, common, self.topics.changelogs, group, self.topics.commands,
                                 self.topology.schedule_partitions, self.codec, config.standbys,
                                 lambda: self.assignment.member_id, self.metrics)
        inputs = [self.topics.commands, self.topics.attempts, self.topics.admissions, self.topics.admission_results]
        self.previous = PreviousOwners(common, self._admin, group, inputs, self._transactional_id)
        self.restores = RestoreReader(common, self.topics.changelogs, self.codec,
                                      on_wait=self.metrics.restore_waiting)
        self.assignment = Assignment(inputs, self.tasks, self.stages, self._open_store, self.restores, self._make_task,
                                     self.metrics, self.standbys, self.previous.fence)

    def stop(self) -> None:
        self._stop.set()

    # -- lifecycle --------------------------------------------------------------

    def run(self) -> None:
        ensure_topics(self._common, self.topology, self.config.prefix)
        self.tenants.follow(self.codec, set(self.consumer.list_topics(timeout=10).topics))
        self.producer = TransactionalProducer(self._producer_conf)
        # Connected now, not at the first takeover's first request (scheduler.kafka.clients.settled).
        settled(self._admin)
        settled(self.previous.offsets)
        self.restores.connect()
        self._subscribe()
        self.standbys.start()
        try:
            while not self._stop.is_set():
                self._turn()
                self.metrics.turned()
        finally:
            self._close()

    def _subscribe(self) -> None:
        topics = self.topics
        self.consumer.subscribe([topics.commands, topics.attempts, topics.admissions, topics.admission_results],
                                on_assign=self.assignment.on_assign,
                                on_revoke=self.assignment.on_revoke, on_lost=self.assignment.on_revoke)

    def _close(self) -> None:
        try:
            self.standbys.close()
            self.stages.close()
            self.assignment.close()
            self.previous.close()
            self.consumer.close()
            self.tenants.close()
        finally:
            self.tasks.close_all()
            if self.producer is not None:
                self.producer.raw.flush(5)

    def _open_store(self, partition: int) -> PartitionStore:
        return PartitionStore(self.config.instance_dir / f"p{partition}")

    def _make_task(self, partition: int, store: PartitionStore) -> SchedulerTask:
        return SchedulerTask(partition, store, self.topics, self.codec, self.tenants.policy(), self.config.horizon_ms,
                             self.topology.schedule_partitions)

    # -- one transaction ----------------------------------------------------------

    def _turn(self) -> None:
        now_ms = int(self.clock() * 1000)
        messages = self.consumer.consume(self.config.input_batch, timeout=self._poll_timeout_s(now_ms))
        now_ms = int(self.clock() * 1000)
        inputs = [m for m in messages if not is_noise(m)]
        self.assignment.step(time.monotonic() + self.config.restore_slice_ms / 1000)
        self.stages.step(now_ms)
        if not inputs and not due_work.has_due_work(self.tasks.values(), now_ms):
            return
        producer = self.producer
        assert producer is not None
        self._turn_began_ms = now_ms
        first_offsets: dict[tuple[str, int], int] = {}
        phases = [time.perf_counter()]
        producer.begin()
        try:
            next_offsets, deferred = self._apply_inputs(inputs, now_ms, first_offsets)
            phases.append(time.perf_counter())
            # A backlog of heartbeats is not silence: leases expire only in a turn that drained its inputs.
            self._due_work(now_ms, phases, drained=len(messages) < self.config.input_batch and not deferred)
            self.tenants.ensure_topics(set().union(*(task.ctx.tenants_used for task in self.tasks.values())))
            changelog_offsets = produce_outputs(producer, self.tasks.values(), self.stages.held())
            phases.append(time.perf_counter())
            if next_offsets:
                tag = owner_tag(self._transactional_id, self.consumer.memberid() or "")
                producer.send_offsets([TopicPartition(topic, p, o, metadata=tag)
                                       for (topic, p), o in next_offsets.items()],
                                      self.consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S)
            committing = time.perf_counter()
            producer.commit(30, self.config.transaction_timeout_ms / 1000)
            commit_seconds = time.perf_counter() - committing
        except KafkaException as exc:
            self._abandon(exc, first_offsets)
            return
        self._committed(changelog_offsets, commit_seconds)
        phases.append(time.perf_counter())
        if phases[-1] - phases[0] > SLOW_TURN_S:
            spent = ", ".join(f"{name} {b - a:.2f}s"
                              for name, a, b in zip(TURN_PHASES, phases, phases[1:], strict=False))
            log.info("slow turn (%d inputs): %s", len(inputs), spent)
        self._read_partitions()

    def _read_partitions(self) -> None:
        """What is due and not sent, after the commit: entries due, and fires due but not yet planned."""
        now_ms = int(self.clock() * 1000)
        self.metrics.partitions(now_ms, planning_lead_ms(self.config.horizon_ms),
                                due_work.partition_readings(self.tasks, now_ms))

    def _apply_inputs(self, inputs: list[Any], now_ms: int,
                      first_offsets: dict[tuple[str, int], int]) -> tuple[dict[tuple[str, int], int], bool]:
        """Hand each record to its partition's task, for at most the input slice; returns the offsets to
        commit and whether records were left for the next turn, and notes in `first_offsets` where to
        rewind should the turn abort."""
        next_offsets: dict[tuple[str, int], int] = {}
        deadline = time.perf_counter() + self.config.input_slice_ms / 1000
        for index, msg in enumerate(inputs):
            task = self.tasks.get(msg.partition())
            if task is None:
                self.assignment.unowned(msg.topic(), msg.partition(), msg.offset())
                continue
            source = (msg.topic(), msg.partition())
            if index and time.perf_counter() > deadline:
                self._defer(inputs[index:])
                return next_offsets, True
            first_offsets.setdefault(source, msg.offset())
            next_offsets[source] = msg.offset() + 1
            task.handlers[msg.topic()](msg.key(), msg.value(), msg.offset(), now_ms)
        return next_offsets, False

    def _defer(self, inputs: list[Any]) -> None:
        """The turn's input slice is spent (a CreateBatch is hundreds of creates): the rest is read again."""
        first: dict[tuple[str, int], int] = {}
        for msg in inputs:
            if msg.partition() in self.tasks:
                first.setdefault((msg.topic(), msg.partition()), msg.offset())
            else:
                self.assignment.unowned(msg.topic(), msg.partition(), msg.offset())
        for (topic, partition), offset in first.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))
        self.metrics.inputs_deferred.inc(len(inputs))

    def _due_work(self, now_ms: int, phases: list[float], drained: bool) -> None:
        for task in self.tasks.values():
            task.slots.expire(task.ctx.txn, now_ms)
            if drained:
                task.attempts.expire_leases(now_ms)
        backlog = self._dispatch(now_ms)
        phases.append(time.perf_counter())
        # Due work first: while a burst is still being sent, planning ahead gets a tenth of its share.
        budget = self.config.materialize_budget // (10 if backlog else 1)
        # A committed stage's local deletes, stage_chunk a turn over all partitions: a turn right after the
        # instant stays short for the occurrences due just after it (issue 16).
        deletes = max(1, self.config.stage_chunk // max(1, len(self.tasks)))
        plan_until = time.perf_counter() + self.config.plan_slice_ms / 1000
        tasks = list(self.tasks.values())
        self._plan_from = (self._plan_from + 1) % max(1, len(tasks))  # who plans first when the slice runs out
        for task in tasks[self._plan_from:] + tasks[:self._plan_from]:
            task.admissions.send_reservations(now_ms, self._local_counter)
            task.admissions.settle_running_slots(now_ms)
            task.timeline.materialize_due(now_ms, budget, plan_until)
            task.scan.delete_staged(deletes)
        if self.stages.contradicted():
            self.stages.drop("a change was accepted for an occurrence it holds")
        phases.append(time.perf_counter())

    def _local_counter(self, tenant: str) -> Admissions | None:
        """The admission side of the partition counting `tenant`, when this process owns it."""
        task = self.tasks.get(partition_for(tenant.encode(), self.topology.schedule_partitions))
        return None if task is None else task.admissions

    def _abandon(self, exc: KafkaException, first_offsets: dict[tuple[str, int], int]) -> None:
        """Abort the turn: its inputs are read again, its work forgotten."""
        error = exc.args[0]
        if not error.txn_requires_abort():
            raise exc
        log.warning("aborting transaction: %s", error)
        assert self.producer is not None
        self.producer.abort(30)
        self.metrics.aborted()
        for task in self.tasks.values():
            task.reset()
        for (topic, partition), offset in first_offsets.items():
            self.consumer.seek(TopicPartition(topic, partition, offset))

    def _committed(self, changelog_offsets: dict[int, dict[str, int]], commit_seconds: float) -> None:
        events: Counter[str] = Counter()
        dead: Counter[str] = Counter()
        concurrency_held: Counter[str] = Counter()
        for task in self.tasks.values():
            events.update(task.ctx.event_counts)
            dead.update(task.ctx.dead_letters)
            concurrency_held.update(task.slots.blocked)
        self.metrics.committed(int(self.clock() * 1000), commit_seconds, events, dead, concurrency_held)
        for partition, task in self.tasks.items():
            task.committed(changelog_offsets.get(partition, {}))

    def _poll_timeout_s(self, now_ms: int) -> float:
        pace = due_work.Pace(self.assignment.restoring, self._held_up, self.stages.filling, self.stages.under_way,
                             self._turn_began_ms, self.config.idle_poll_ms, self.config.turn_interval_ms)
        return due_work.poll_timeout_s(now_ms, lambda: due_work.next_due_ms(self.tasks.values()), pace)

    def _dispatch(self, now_ms: int) -> bool:
        """Send what is due; True when the strict lane had more than one turn's budget."""
        tasks = self.tasks.values()
        strict = dispatch_lane.dispatch(tasks, DISPATCH, now_ms, self.config.dispatch_budget, self.trigger_limits,
                                        self.metrics)
        if strict < self.config.dispatch_budget:
            catch_up = dispatch_lane.dispatch(tasks, CATCH_UP, now_ms, self.config.catch_up_budget,
                                              self.catch_up_limits, self.metrics)
            self._held_up = strict + catch_up == 0 and due_work.has_due_entries(tasks, now_ms)
            return False
        self._held_up = False
        return True
