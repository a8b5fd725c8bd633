"""What a scheduler process is configured with (`scheduler run`'s options)."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scheduler.engine.state_dir import instance_dir
from scheduler.engine.task_context import TaskTopics
from scheduler.wire.partitioning import PRODUCER_PARTITIONER_CONF
from scheduler.wire.topology import Topology

# Batching of the engine's transactional producers; the benches' ceilings use the same.
PRODUCER_BATCHING = {"linger.ms": 5, "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
                     "compression.type": "lz4"}

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
    # False (strict): commands of a tenant not in the tenants topic are rejected with UNKNOWN_TENANT and
    # nothing of it is created; True: any tenant name is taken, with the defaults above (development, demo).
    open_tenants: bool = False
    # librdkafka settings for every client of the process (SASL_SSL credentials, CA file); the engine's own
    # settings (transactions, isolation, group) are refused there (scheduler.kafka.clients.client_settings).
    client_config: dict[str, str] = field(default_factory=dict)
    # How long a turn's transaction may stay open. A process killed mid-turn leaves it open, and the new owner's
    # restore waits for it (it cannot read past it): 10 s, as Kafka Streams' exactly-once default, where a
    # healthy turn commits in well under a second.
    transaction_timeout_ms: int = 10_000
    # Restoring newly assigned partitions takes at most this much of each turn (the loop runs back to back
    # while a restore is pending), so the partitions already owned keep dispatching meanwhile.
    restore_slice_ms: int = 200
    input_batch: int = 1_000  # input records a turn takes: keeps each transaction well inside its timeout
    # A turn stops taking its input records after this long (the rest are read again by the next one): a
    # CreateBatch is hundreds of creates, so the record count alone does not bound a turn's work.
    input_slice_ms: int = 500
    # Planning (fires entering the planning lead) takes at most this much of a turn, after its dispatch: a
    # turn's length is what an occurrence falling due during it waits, and a fire is planned a lead (60 s by
    # default) ahead, so what does not fit waits a turn at no cost.
    plan_slice_ms: int = 100
    idle_poll_ms: int = 50
    # The loop's poll waits at least this long after a turn with work began before it turns again for due
    # entries: each turn is a transaction whose fixed cost (begin, produce flush, commit, store write, metrics)
    # outweighed its few occurrences when the loop turned for every entry falling due. Inputs, restores, a
    # stage and the burst counter's sweep still turn the loop sooner (a CI run counted 50 turns/s at 2,333/s).
    turn_interval_ms: int = 100
    # Staged bursts (scheduler/engine/stage_policy.py): strict occurrences due at one instant, at least this many
    # in the process (0: never), are produced ahead in a transaction committed at the instant.
    stage_min: int = 40_000
    stage_chunk: int = 20_000          # staged per turn, so commands keep flowing while a stage fills
    stage_max_lead_ms: int = 60_000
    stage_rate_per_s: float = 50_000.0  # first guess (measured 39,000-83,000/s on 2 cores); each stage measures anew
    # Records a stage produces and flushes a second, until one has measured it: sets its produce window. The
    # broker accepted 500,000 in about 3.4 s on 2 cores; a window too long costs little since the stage
    # layouts (ADR 0002), one too short makes the commit late.
    stage_produce_rate_per_s: float = 140_000.0
    # Warm copies of each partition kept by other processes (Kafka Streams' num.standby.replicas), placed by
    # scheduler/engine/standby_placement.py; a lone process owns everything and keeps none. 0: no standbys.
    standbys: int = 1

    @property
    def instance_dir(self) -> Path:
        """This process's stores, `<state_dir>/<prefix>/<instance_id>` (scheduler/engine/state_dir.py)."""
        return instance_dir(self.state_dir, self.prefix, self.instance_id)


def task_topics(topology: Topology, prefix: str) -> TaskTopics:
    name = topology.topic_name
    return TaskTopics(
        commands=name("commands", prefix), attempts=name("attempts", prefix),
        admissions=name("admissions", prefix), admission_results=name("admission-results", prefix),
        command_results=name("command-results", prefix), occurrence_events=name("occurrence-events", prefix),
        changelogs={"schedules": name("schedules", prefix), "timeline": name("timeline-changelog", prefix),
                    "occurrences": name("occurrence-status-changelog", prefix),
                    "admissions": name("admission-changelog", prefix)})


def consumer_conf(common: dict[str, Any], group: str, client_id: str) -> dict[str, Any]:
    """The group member, in the KIP-848 `consumer` protocol: assignment is incremental (a join or a leave
    moves only the partitions that must move) and computed by the broker's `range` assignor, which gives
    partition p of every input topic to one member (the inputs are co-partitioned, equal partition counts).
    No static membership (KIP-345): with it, a process restarted after a kill -9 under the same instance id
    was first given its partitions and then fenced by the broker ("instance ID is still used by another
    member"), a fatal consumer error that stopped its dispatch; a restart joins as a new member instead, and
    the dead one leaves after the session timeout. The session and heartbeat are the group's, set on the
    broker (`group.consumer.session.timeout.ms`, scheduler/broker/local.py). read_committed hides what
    aborted turns wrote. The client id is the process's transactional id: the group's description then
    says which turns' producers belong to live members (scheduler/engine/previous_owner.py)."""
    return {**common, "group.id": group, "client.id": client_id, "group.protocol": "consumer",
            "group.remote.assignor": "range", "enable.auto.commit": False, "isolation.level": "read_committed",
            "auto.offset.reset": "earliest", "max.poll.interval.ms": 300_000}


def producer_conf(common: dict[str, Any], config: EngineConfig) -> dict[str, Any]:
    """The turns' producer: one transactional id per process, fenced through the group metadata (KIP-447)."""
    return {**common, **PRODUCER_PARTITIONER_CONF,
            "transactional.id": f"{config.prefix}.scheduler.{config.instance_id}",
            "transaction.timeout.ms": config.transaction_timeout_ms, **PRODUCER_BATCHING}
