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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from scheduler.admin import ensure_tenant_topics, ensure_topics
from scheduler.codec import Codec
from scheduler.engine import staging, timeline_keys
from scheduler.engine.fairness import RateLimits, interleave
from scheduler.engine.partition_store import PartitionStore
from scheduler.engine.restore import restore_partition
from scheduler.engine.staging import Stage, StagedPartition
from scheduler.engine.task import SchedulerTask, TaskTopics
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, LocalEntry
from scheduler.kafka.transactional import TransactionalProducer
from scheduler.metrics import EngineMetrics
from scheduler.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.topology import Topology
from scheduler.views import TenantView

log = logging.getLogger(__name__)

SLOW_TURN_S = 1.0  # a turn longer than this is logged with where its time went
TURN_PHASES = ("inputs", "dispatch", "materialize", "produce", "commit")
# Batching of the engine's transactional producers; the benches' ceilings use the same.
PRODUCER_BATCHING = {"linger.ms": 5, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
                     "compression.type": "lz4"}
SCAN_FACTOR = 4  # due entries a partition's scan may pass over (held by max_concurrency) per entry offered


@dataclass
class EngineConfig:
    bootstrap_servers: str
    prefix: str
    state_dir: Path
    instance_id: str
    horizon_ms: int = 120_000
    # Occurrences a turn sends. A transaction's cost follows the partitions it touches more than its
    # records (bench/txn_partitions.py: 808 partitions ~0.7 s for 5,000 or 20,000 records, 8 partitions
    # 0.07-0.12 s), and a top-of-the-hour burst interleaves every tenant's topics; 20,000 still commits
    # far inside the transaction timeout.
    dispatch_budget: int = 20_000
    catch_up_budget: int = 1_000
    materialize_budget: int = 2_000
    trigger_rate_per_s: float = 1_000_000.0
    catch_up_rate_per_s: float = 100.0
    retry_budget_per_min: int = 6_000
    max_active_schedules: int = 2**62
    max_concurrency: int | None = None  # of a tenant not in the tenants topic; None: not counted
    tenant_trigger_rates: dict[str, float] = field(default_factory=dict)
    transaction_timeout_ms: int = 30_000
    input_batch: int = 1_000  # input records a turn takes: keeps each transaction well inside its timeout
    idle_poll_ms: int = 50
    # Staged bursts (scheduler/engine/staging.py): strict occurrences due at one instant, at least this many
    # in the process (0: never), are produced ahead in a transaction committed at the instant.
    stage_min: int = 40_000
    stage_chunk: int = 20_000          # staged per turn, so commands keep flowing while a stage fills
    stage_max_lead_ms: int = 60_000
    stage_rate_per_s: float = 50_000.0  # first guess (measured 39,000-83,000/s on 2 cores); each stage measures anew


class SchedulerProcess:
    def __init__(self, config: EngineConfig, clock: Callable[[], float] = time.time,
                 metrics: EngineMetrics | None = None) -> None:
        self.config = config
        self.clock = clock
        self.metrics = metrics if metrics is not None else EngineMetrics()
        self.topology = Topology.load()
        self.codec = Codec.default()
        prefix = config.prefix
        self.topics = TaskTopics(
            commands=self.topology.topic_name("commands", prefix),
            attempts=self.topology.topic_name("attempts", prefix),
            admissions=self.topology.topic_name("admissions", prefix),
            admission_results=self.topology.topic_name("admission-results", prefix),
            command_results=self.topology.topic_name("command-results", prefix),
            occurrence_events=self.topology.topic_name("occurrence-events", prefix),
            changelogs={
                "schedules": self.topology.topic_name("schedules", prefix),
                "timeline": self.topology.topic_name("timeline-changelog", prefix),
                "occurrences": self.topology.topic_name("occurrence-status-changelog", prefix),
                "admissions": self.topology.topic_name("admission-changelog", prefix),
            },
        )
        self.tenant_defaults = {
            "max_active_schedules": config.max_active_schedules,
            "trigger_rate_per_s": config.trigger_rate_per_s,
            "catch_up_rate_per_s": config.catch_up_rate_per_s,
            "retry_budget_per_min": config.retry_budget_per_min,
            "max_concurrency": config.max_concurrency,
        }
        self.tenants: TenantView | None = None  # quotas and rates, followed in the background
        self.trigger_limits = RateLimits(self._trigger_rate)
        self.catch_up_limits = RateLimits(lambda tenant: self._quota(tenant, "catch_up_rate_per_s"))
        self.retry_limits = RateLimits(lambda tenant: self._quota(tenant, "retry_budget_per_min") / 60,
                                       burst_seconds=60)
        self.tasks: dict[int, SchedulerTask] = {}
        self.known_tenants: set[str] = set()
        self._topic_names: dict[tuple[str, str, str | None], str] = {}
        self._stop = threading.Event()
        self._held_up = False  # the last turn had due work and could send none of it
        common = {"bootstrap.servers": config.bootstrap_servers}
        self._common = common
        self.consumer = Consumer({
            **common,
            "group.id": self.topology.tasks["scheduler"].consumer_group(prefix),
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "partition.assignment.strategy": "range",
            "max.poll.interval.ms": 300_000,
            "session.timeout.ms": 6_000,
            "heartbeat.interval.ms": 1_000,
        })
        self._producer_conf = {
            **common,
            **PRODUCER_PARTITIONER_CONF,
            "transactional.id": f"{prefix}.scheduler.{config.instance_id}",
            "transaction.timeout.ms": config.transaction_timeout_ms,
            **PRODUCER_BATCHING,
        }
        self.producer: TransactionalProducer | None = None  # the turns' producer, made when the process runs
        # Stage producers, one per owned partition (see _open_stagers); a stage uses the one of its lowest partition.
        self._stagers: dict[int, TransactionalProducer] = {}
        self._stage: Stage | None = None
        self._stage_rate = config.stage_rate_per_s
        self._burst_counts: tuple[int, dict[int, int]] | None = None  # (counted at ms, due_ms -> strict entries)

    def stop(self) -> None:
        self._stop.set()

    # -- lifecycle --------------------------------------------------------------

    def run(self) -> None:
        ensure_topics(self.config.bootstrap_servers, self.topology, self.config.prefix)
        self.tenants = TenantView(self.config.bootstrap_servers, self.config.prefix, self.codec)
        self.known_tenants.update(self._existing_tenants())
        self.producer = TransactionalProducer(self._producer_conf)
        self._handlers = {self.topics.commands: "on_command", self.topics.attempts: "on_attempt",
                          self.topics.admissions: "on_admission_request",
                          self.topics.admission_results: "on_admission_result"}
        self.consumer.subscribe(list(self._handlers), on_assign=self._on_assign,
                                on_revoke=self._on_revoke, on_lost=self._on_revoke)
        try:
            while not self._stop.is_set():
                self._turn()
        finally:
            self._close()

    def _close(self) -> None:
        try:
            self._drop_stage("the process is stopping")
            self.consumer.close()
            if self.tenants is not None:
                self.tenants.close()
        finally:
            for task in self.tasks.values():
                task.store.close()
            self.tasks.clear()
            self._stagers.clear()
            if self.producer is not None:
                self.producer.raw.flush(5)

    def _existing_tenants(self) -> set[str]:
        marker = f"{self.config.prefix}.occurrences."
        names = self.consumer.list_topics(timeout=10).topics
        return {name[len(marker):].rsplit(".", 1)[0] for name in names if name.startswith(marker)}

    def _ensure_tenant(self, tenant: str) -> None:
        if tenant not in self.known_tenants:
            ensure_tenant_topics(self.config.bootstrap_servers, self.topology, self.config.prefix, tenant)
            self.known_tenants.add(tenant)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        assigned = sorted({tp.partition for tp in partitions})
        self._open_stagers([p for p in assigned if p not in self.tasks])
        for partition in assigned:
            if partition in self.tasks:
                continue
            store = PartitionStore(self.config.state_dir / self.config.prefix / f"p{partition}")
            with self.metrics.restore():
                applied = restore_partition(store, self._common, self.topics.changelogs, partition, self.codec,
                                            on_wait=self.metrics.restore_waiting)
            self.metrics.restored(applied)
            self.tasks[partition] = SchedulerTask(
                partition, store, self.topics, self.codec, self._tenant_topic, self.config.horizon_ms,
                self._ensure_tenant, self._retry_allowed,
                lambda tenant: self._quota(tenant, "max_active_schedules"),
                lambda tenant: self._quota(tenant, "max_concurrency"), self.topology.schedule_partitions)
        self.metrics.assigned(assigned, len(self.tasks))
        log.info("assigned partitions %s", assigned)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        revoked = sorted({tp.partition for tp in partitions})
        if self._stage is not None and set(revoked) & self._stage.partitions.keys():
            self._drop_stage(f"partitions {revoked} revoked")
        for partition in revoked:
            task = self.tasks.pop(partition, None)
            if task is not None:
                task.store.close()
            self._stagers.pop(partition, None)
        self.metrics.revoked(revoked, len(self.tasks))
        log.info("revoked partitions %s", revoked)

    def _quota(self, tenant: str, name: str) -> Any:
        found = self.tenants.get(tenant) if self.tenants is not None else None
        return found[name] if found is not None else self.tenant_defaults[name]

    def _trigger_rate(self, tenant: str) -> float:
        override = self.config.tenant_trigger_rates.get(tenant)
        return override if override is not None else self._quota(tenant, "trigger_rate_per_s")

    def _retry_allowed(self, tenant: str, now_ms: int) -> bool:
        return self.retry_limits.bucket(tenant).take(1, now_ms) == 1

    def _tenant_topic(self, key: str, tenant: str, priority: str | None) -> str:
        cache_key = (key, tenant, priority)
        name = self._topic_names.get(cache_key)
        if name is None:
            name = self._topic_names[cache_key] = self.topology.topic_name(
                key, self.config.prefix, tenant=tenant, priority=priority)
        return name

    # -- one transaction ----------------------------------------------------------

    def _turn(self) -> None:
        now_ms = int(self.clock() * 1000)
        timeout = self._poll_timeout_s(now_ms)
        messages = self.consumer.consume(self.config.input_batch, timeout=timeout)
        now_ms = int(self.clock() * 1000)
        inputs = [m for m in messages if not self._is_noise(m)]
        self._stage_step(now_ms)
        if not inputs and not self._has_due_work(now_ms):
            return
        first_offsets: dict[tuple[str, int], int] = {}
        next_offsets: dict[tuple[str, int], int] = {}
        phases = [time.perf_counter()]
        producer = self.producer
        assert producer is not None
        producer.begin()
        try:
            for msg in inputs:
                task = self.tasks.get(msg.partition())
                if task is None:
                    continue
                source = (msg.topic(), msg.partition())
                first_offsets.setdefault(source, msg.offset())
                next_offsets[source] = msg.offset() + 1
                getattr(task, self._handlers[msg.topic()])(msg.key(), msg.value(), msg.offset(), now_ms)
            phases.append(time.perf_counter())
            for task in self.tasks.values():
                task.slots.expire(task.txn, now_ms)
            backlog = self._dispatch(now_ms)
            phases.append(time.perf_counter())
            # Due work first: while a burst is still being sent, planning ahead gets a tenth of its share.
            budget = self.config.materialize_budget // (10 if backlog else 1)
            for task in self.tasks.values():
                task.settle_running_slots(now_ms)
                task.materialize_due(now_ms, budget)
                task.delete_staged(self.config.stage_chunk)
            if self._stage is not None and any(task.contradicts_stage() for task in self.tasks.values()):
                self._drop_stage("a change was accepted for an occurrence it holds")
            phases.append(time.perf_counter())
            changelog_offsets = self._produce_outputs()
            phases.append(time.perf_counter())
            if next_offsets:
                producer.send_offsets([TopicPartition(topic, p, o) for (topic, p), o in next_offsets.items()],
                                      self.consumer.consumer_group_metadata(), 30)
            committing = time.perf_counter()
            producer.commit(30, self.config.transaction_timeout_ms / 1000)
            commit_seconds = time.perf_counter() - committing
        except KafkaException as exc:
            error = exc.args[0]
            if not error.txn_requires_abort():
                raise
            log.warning("aborting transaction: %s", error)
            producer.abort(30)
            self.metrics.aborted()
            for task in self.tasks.values():
                task.reset()
            for (topic, partition), offset in first_offsets.items():
                self.consumer.seek(TopicPartition(topic, partition, offset))
            return
        events: Counter[str] = Counter()
        dead: Counter[str] = Counter()
        concurrency_held: Counter[str] = Counter()
        for task in self.tasks.values():
            events.update(task.event_counts)
            dead.update(task.dead_letters)
            concurrency_held.update(task.slots.blocked)
        self.metrics.committed(int(self.clock() * 1000), commit_seconds, events, dead, concurrency_held)
        for partition, task in self.tasks.items():
            task.committed(changelog_offsets.get(partition, {}))
        phases.append(time.perf_counter())
        if phases[-1] - phases[0] > SLOW_TURN_S:
            spent = ", ".join(f"{name} {b - a:.2f}s" for name, a, b in zip(TURN_PHASES, phases, phases[1:]))
            log.info("slow turn (%d inputs): %s", len(inputs), spent)
        self.metrics.partitions(int(self.clock() * 1000), self.config.horizon_ms, self.tasks.values())

    def _is_noise(self, msg: Any) -> bool:
        error = msg.error()
        if error is None:
            return False
        if error.code() == KafkaError._PARTITION_EOF:
            return True
        if error.fatal():
            raise KafkaException(error)
        log.warning("consumer error: %s", error)
        return True

    def _poll_timeout_s(self, now_ms: int) -> float:
        """Until the next due entry; after a turn that could send nothing of what was due (all held back
        by rate or running-slot limits) the idle poll, so waiting on a limit does not spin the loop."""
        if self._held_up:
            return self.config.idle_poll_ms / 1000.0
        if self._stage is not None and not self._stage.complete:
            return 0.0
        soonest = None
        for task in self.tasks.values():
            for lane in (DISPATCH, CATCH_UP):
                due = task.next_due_ms(lane)
                if due is not None and (soonest is None or due < soonest):
                    soonest = due
        wait_ms = self.config.idle_poll_ms if soonest is None else min(self.config.idle_poll_ms, soonest - now_ms)
        return max(0.0, wait_ms / 1000.0)

    def _has_due_work(self, now_ms: int) -> bool:
        return self._due_entries(now_ms) or any(task.has_wake_due(now_ms) or task.has_staged_to_delete()
                                                for task in self.tasks.values())

    def _due_entries(self, now_ms: int) -> bool:
        for task in self.tasks.values():
            for lane in (DISPATCH, CATCH_UP):
                due = task.next_due_ms(lane)
                if due is not None and due <= now_ms:
                    return True
        return False

    def _dispatch(self, now_ms: int) -> bool:
        """Send what is due; True when the strict lane had more than one turn's budget."""
        strict = self._select(DISPATCH, now_ms, self.config.dispatch_budget, self.trigger_limits)
        if strict < self.config.dispatch_budget:
            catch_up = self._select(CATCH_UP, now_ms, self.config.catch_up_budget, self.catch_up_limits)
            self._held_up = strict + catch_up == 0 and self._due_entries(now_ms)
            return False
        self._held_up = False
        return True

    def _select(self, lane: bytes, now_ms: int, budget: int, limits: RateLimits) -> int:
        """Offer each partition's share of the budget to the tenant interleaving, then send the chosen.

        Only the head of an entry (deadline, overlap policy, tenant) is read to choose; the rest
        is unpacked for the entries actually sent, or for the rare late and overlap-guarded ones.
        """
        candidates: list[tuple[str, tuple[SchedulerTask, bytes, bytes]]] = []
        due_seen: dict[int, int] = {}
        share = max(1, -(-budget // max(1, len(self.tasks))))
        for task in self.tasks.values():
            late: set[str] = set()
            guarded: dict[str, list[tuple[bytes, LocalEntry]]] = {}
            guarded_raw: dict[bytes, bytes] = {}
            before = len(candidates)
            offered, scan_left = 0, share * SCAN_FACTOR
            for key, raw in task.due(lane, now_ms):
                if offered >= share or scan_left == 0:
                    break
                scan_left -= 1
                deadline_ms, overlap, tenant = LocalEntry.head(raw)
                if deadline_ms >= now_ms and not task.slots.take(task.txn, tenant):
                    continue  # the tenant is at its max_concurrency: the entry waits for a free slot
                offered += 1
                if deadline_ms < now_ms or late or overlap != "ALLOW":
                    entry = LocalEntry.unpack(raw)
                    if deadline_ms < now_ms:
                        late.add(entry.schedule_id)
                        continue
                    if entry.schedule_id in late:
                        continue
                    if overlap != "ALLOW":
                        guarded.setdefault(entry.schedule_id, []).append((key, entry))
                        guarded_raw[key] = raw
                        continue
                candidates.append((tenant, (task, key, raw)))
            for schedule_id in late:
                task.replan_late(schedule_id, now_ms)
            for schedule_id, due in guarded.items():
                if schedule_id not in late:
                    candidates.extend((entry.tenant, (task, key, guarded_raw[key]))
                                      for key, entry in task.admit_overlapping(schedule_id, due, now_ms))
            due_seen[task.partition] = len(candidates) - before
        if not candidates:
            self.metrics.selected(lane, now_ms, [], due_seen, {})
            return 0
        selection = interleave(candidates, budget, limits, now_ms)
        self.metrics.selected(lane, now_ms, selection.chosen, due_seen, selection.held_back)
        for task, key, raw in selection.chosen:
            entry = LocalEntry.unpack(raw)
            task.outbox.append((entry.topic, entry.schedule_id.encode(), entry.occurrence, None))
            task.dispatched(key, entry, now_ms)
        return len(selection.chosen)

    # -- staged bursts ------------------------------------------------------------

    def _stage_step(self, now_ms: int) -> None:
        """Between turns (no transaction open on the main producer): start, fill or commit the stage."""
        stage = self._stage
        if stage is None:
            burst = self._next_burst(now_ms)
            if burst is None:
                return
            stage = self._begin_stage(burst, now_ms)
        if now_ms >= stage.due_ms:
            self._commit_stage()
        elif not stage.complete:
            self._fill_stage(stage)

    def _next_burst(self, now_ms: int) -> int | None:
        """The instant of a strict burst to stage now, if any. Every instant within the longest lead is
        counted (not just the next one: a burst often comes after smaller instants of steady traffic),
        again every COUNT_EVERY_MS."""
        if self.config.stage_min <= 0 or not self.tasks:
            return None
        if self._burst_counts is None or now_ms - self._burst_counts[0] >= staging.COUNT_EVERY_MS:
            start = staging.instant_range(now_ms + staging.MARGIN_MS)[1]
            end = staging.instant_range(now_ms + self.config.stage_max_lead_ms)[1]
            counts: Counter[bytes] = Counter()
            for task in self.tasks.values():
                counts.update(key[1:9] for key in task.store.keys_from("timeline", start, end))
            self._burst_counts = (now_ms, {timeline_keys.due_ms_of(DISPATCH + due): n for due, n in counts.items()})
        return staging.choose(self._burst_counts[1], now_ms, self.config.stage_min, self._stage_rate,
                              self.config.stage_max_lead_ms)

    def _stage_conf(self, partition: int) -> dict[str, Any]:
        return {**self._producer_conf,
                "transactional.id": staging.transactional_id(self.config.prefix, partition),
                "transaction.timeout.ms": self.config.stage_max_lead_ms + self.config.transaction_timeout_ms,
                "queue.buffering.max.messages": 2_000_000}

    def _new_stager(self, partition: int) -> TransactionalProducer:
        """Initialising a partition's stage id fences every earlier producer with it and aborts the stage it
        left open (a crashed owner of any instance id, or an abort that failed), which would otherwise hold
        back the readers of the stage's partitions until its transaction timeout."""
        return TransactionalProducer(self._stage_conf(partition))

    def _open_stagers(self, partitions: list[int]) -> None:
        """Before newly assigned partitions are restored: the stage producers named after them, so that a stage
        the previous owner left open is aborted now, whatever that owner's instance id."""
        with ThreadPoolExecutor(max_workers=max(1, len(partitions))) as pool:
            self._stagers.update(zip(partitions, pool.map(self._new_stager, partitions)))

    def _begin_stage(self, due_ms: int, now_ms: int) -> Stage:
        producer_partition = min(self.tasks)
        if producer_partition not in self._stagers:  # making one after a failed abort failed too
            self._stagers[producer_partition] = self._new_stager(producer_partition)
        self._stagers[producer_partition].begin()
        first, end = staging.instant_range(due_ms)
        stage = self._stage = Stage(due_ms, {n: StagedPartition(first, end) for n in self.tasks}, now_ms,
                                    producer_partition)
        counted = self._burst_counts[1].get(due_ms, 0) if self._burst_counts else 0
        log.info("staging the burst due at %d (%d entries, %.1f s ahead)", due_ms, counted, (due_ms - now_ms) / 1000)
        return stage

    def _fill_stage(self, stage: Stage) -> None:
        stager = self._stagers[stage.producer_partition]
        for partition, share in stage.shares(self.config.stage_chunk).items():
            task = self.tasks[partition]

            def accept(overlap_policy: str, tenant: str, task: SchedulerTask = task) -> bool:
                if not staging.stageable(overlap_policy, task.slots.is_limited(tenant)):
                    return False
                if self.trigger_limits.bucket(tenant).take(1, stage.due_ms) == 0:
                    return False
                stage.tokens[tenant] += 1
                return True

            for entry in task.stage(stage.partitions[partition], share, accept):
                stager.produce(entry.topic, entry.occurrence, entry.schedule_id.encode(), timestamp=stage.due_ms)
        stager.raw.poll(0)
        if stage.complete:
            stage.completed_ms = int(self.clock() * 1000)
            log.info("staged %d occurrences due at %d in %.1f s", stage.count, stage.due_ms,
                     (stage.completed_ms - stage.started_ms) / 1000)

    def _commit_stage(self) -> None:
        stage = self._stage
        assert stage is not None
        started = time.perf_counter()
        try:
            self._stagers[stage.producer_partition].commit(self.config.transaction_timeout_ms / 1000,
                                                           self.config.transaction_timeout_ms / 1000)
        except KafkaException as exc:
            self._drop_stage(f"its commit failed: {exc.args[0]}")
            return
        visible_ms = int(self.clock() * 1000)
        for partition, part in stage.partitions.items():
            self.tasks[partition].staged_sent(part)
        rate = stage.rate_per_s()
        if rate is not None:
            self._stage_rate = rate
        self._stage = None
        self.metrics.staged(stage.due_ms, visible_ms, stage.count, time.perf_counter() - started)
        log.info("committed the staged burst due at %d: %d occurrences visible %d ms after it", stage.due_ms,
                 stage.count, visible_ms - stage.due_ms)

    def _drop_stage(self, reason: str) -> None:
        """Abort the stage: its occurrences are still in the timeline and go the ordinary way."""
        stage, self._stage = self._stage, None
        if stage is None:
            return
        log.warning("dropping the staged burst due at %d (%d occurrences): %s", stage.due_ms, stage.count, reason)
        stager = self._stagers.get(stage.producer_partition)
        try:
            if stager is not None:
                stager.abort(30)
        except KafkaException as exc:  # fenced (the partition's new owner has its id), or no new producer yet
            log.warning("stage producer dropped (%s); the next stage makes one", exc.args[0])
            del self._stagers[stage.producer_partition]
        for tenant, n in stage.tokens.items():
            self.trigger_limits.bucket(tenant).tokens += n
        for partition in stage.partitions:
            task = self.tasks.get(partition)
            if task is not None:
                task.stage_dropped()
        self.metrics.stage_dropped(stage.count)

    def _produce_outputs(self) -> dict[int, dict[str, int]]:
        """Produce every task's outbox and changelog; returns the changelog offsets to checkpoint."""
        offsets: dict[int, dict[str, int]] = {}
        producer = self.producer
        assert producer is not None
        produce = producer.raw.produce  # the hot path: no callback per record, a failed one fails the commit
        for task in self.tasks.values():
            for topic, key, value, partition in task.outbox:
                if partition is None:
                    produce(topic, value, key)
                else:
                    produce(topic, value, key, partition=partition)
            task_offsets = offsets.setdefault(task.partition, {})
            for store, records in task.changelog_records().items():
                # Records of one partition are delivered in order: the last one's offset covers them all,
                # and any failed delivery fails the commit anyway.
                def delivered(msg: Any, store: str = store, task_offsets: dict[str, int] = task_offsets) -> None:
                    task_offsets[store] = msg.offset() + 1
                *rest, (topic, key, value) = records
                for topic_, key_, value_ in rest:
                    produce(topic_, value_, key_, partition=task.partition)
                producer.produce(topic, value, key, partition=task.partition, on_delivered=delivered)
            producer.raw.poll(0)
        # Undelivered output (e.g. purged when the transaction timed out) fails this turn only: abort it,
        # rewind the inputs and go again; a fenced producer fails the abort.
        producer.flush(30)
        return offsets
