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
from collections.abc import Callable

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from scheduler.engine.active_tasks import ActiveTasks
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
from scheduler.engine.restore_reader import RestoreReader
from scheduler.engine.stage_runner import StageRunner
from scheduler.engine.standbys import Standbys
from scheduler.engine.task import SchedulerTask
from scheduler.engine.task_manager import TakenInputs, TaskManager, first_offsets, rewind
from scheduler.kafka.admin import ensure_topics
from scheduler.kafka.clients import connection, is_noise, settled
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.wire.codec import Codec
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
        self.task_manager = TaskManager(config, self.tasks, self.assignment, self.stages,
                                        (self.trigger_limits, self.catch_up_limits), self.metrics,
                                        self.topology.schedule_partitions)

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
        """poll -> begin -> the tasks (inputs, due work) -> produce -> send offsets -> commit -> write stores."""
        manager = self.task_manager
        now_ms = int(self.clock() * 1000)
        messages = self.consumer.consume(self.config.input_batch,
                                         timeout=manager.poll_timeout_s(now_ms, self._turn_began_ms))
        now_ms = int(self.clock() * 1000)
        inputs = [m for m in messages if not is_noise(m)]
        manager.step(now_ms, time.monotonic() + self.config.restore_slice_ms / 1000)
        if not inputs and not manager.has_work(now_ms):
            return
        producer = self.producer
        assert producer is not None
        self._turn_began_ms = now_ms
        taken = TakenInputs()
        phases = [time.perf_counter()]
        producer.begin()
        try:
            manager.take_inputs(inputs, now_ms, taken)
            rewind(self._seek, first_offsets(taken.left))
            phases.append(time.perf_counter())
            # A backlog of heartbeats is not silence: leases expire only in a turn that drained its inputs.
            manager.due_work(now_ms, drained=len(messages) < self.config.input_batch and not taken.left,
                             phases=phases)
            self.tenants.ensure_topics(manager.tenants_used())
            changelog_offsets = produce_outputs(producer, manager.outputs(), self.stages.held())
            phases.append(time.perf_counter())
            if taken.next_offsets:
                tag = owner_tag(self._transactional_id, self.consumer.memberid() or "")
                producer.send_offsets([TopicPartition(topic, p, o, metadata=tag)
                                       for (topic, p), o in taken.next_offsets.items()],
                                      self.consumer.consumer_group_metadata(), SEND_OFFSETS_TIMEOUT_S)
            committing = time.perf_counter()
            producer.commit(30, self.config.transaction_timeout_ms / 1000)
            commit_seconds = time.perf_counter() - committing
        except KafkaException as exc:
            self._abandon(exc, taken.first_offsets)
            return
        counts = manager.committed(changelog_offsets)
        self.metrics.committed(int(self.clock() * 1000), commit_seconds, counts.events, counts.dead_letters,
                               counts.concurrency_held)
        phases.append(time.perf_counter())
        if phases[-1] - phases[0] > SLOW_TURN_S:
            spent = ", ".join(f"{name} {b - a:.2f}s"
                              for name, a, b in zip(TURN_PHASES, phases, phases[1:], strict=False))
            log.info("slow turn (%d inputs): %s", len(inputs), spent)
        self._read_partitions()

    def _seek(self, topic: str, partition: int, offset: int) -> None:
        self.consumer.seek(TopicPartition(topic, partition, offset))

    def _read_partitions(self) -> None:
        """What is due and not sent, after the commit: entries due, and fires due but not yet planned."""
        now_ms = int(self.clock() * 1000)
        self.metrics.partitions(now_ms, planning_lead_ms(self.config.horizon_ms), self.task_manager.readings(now_ms))

    def _abandon(self, exc: KafkaException, rewind_to: dict[tuple[str, int], int]) -> None:
        """Abort the turn: its inputs are read again, its work forgotten."""
        error = exc.args[0]
        if not error.txn_requires_abort():
            raise exc
        log.warning("aborting transaction: %s", error)
        assert self.producer is not None
        self.producer.abort(30)
        self.metrics.aborted()
        self.task_manager.abandoned()
        rewind(self._seek, rewind_to)
