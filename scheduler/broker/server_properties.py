"""The local broker's server.properties, as plain functions of its ports: one node that is its own
controller, with PLAINTEXT for the trusted local services and optional SCRAM listeners for tenants;
or one node of a local cluster (`Quorum`), every node a controller and a broker."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scheduler.broker.ports import HOST
from scheduler.broker.tls import TlsFiles
from scheduler.kafka.clients import SCRAM_MECHANISM
from scheduler.kafka.replication import min_insync_replicas

SUPER_USER = "admin"


@dataclass(frozen=True)
class Listeners:
    """The broker's ports; SASL_PLAINTEXT and SASL_SSL only when given."""

    port: int
    controller_port: int
    sasl_port: int | None = None
    ssl_port: int | None = None

    @property
    def scram(self) -> bool:
        return self.sasl_port is not None or self.ssl_port is not None


@dataclass(frozen=True)
class Quorum:
    """A node's place in a local cluster: its id, and every node's (id, controller port), itself included."""

    node_id: int
    voters: tuple[tuple[int, int], ...]

    @property
    def voters_setting(self) -> str:
        """`controller.quorum.voters`: a static quorum, so formatting needs no `--initial-controllers`."""
        return ",".join(f"{node}@{HOST}:{port}" for node, port in self.voters)


def server_settings(ports: Listeners, kraft_dir: Path, tls: TlsFiles | None,
                    quorum: Quorum | None = None) -> dict[str, str]:
    """Every setting of server.properties; `tls` is needed exactly when there is an SSL port; `quorum`
    when the node is one of a cluster (its internal topics are then replicated, `replicated_settings`)."""
    by_name = {"PLAINTEXT": ports.port, "CONTROLLER": ports.controller_port}
    protocols = {"CONTROLLER": "PLAINTEXT", "PLAINTEXT": "PLAINTEXT"}
    if ports.sasl_port is not None:
        by_name["SASL_PLAINTEXT"] = ports.sasl_port
        protocols["SASL_PLAINTEXT"] = "SASL_PLAINTEXT"
    if ports.ssl_port is not None:
        by_name["SASL_SSL"] = ports.ssl_port
        protocols["SASL_SSL"] = "SASL_SSL"
    listeners = ",".join(f"{name}://{HOST}:{port}" for name, port in by_name.items())
    return {
        "process.roles": "broker,controller",
        **({"node.id": "1", "controller.quorum.bootstrap.servers": f"{HOST}:{ports.controller_port}"} if quorum is None
           else {"node.id": str(quorum.node_id), "controller.quorum.voters": quorum.voters_setting}),
        "listeners": listeners,
        "advertised.listeners": listeners,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(f"{name}:{kind}" for name, kind in protocols.items()),
        "log.dirs": str(kraft_dir),
        "metadata.log.dir": str(kraft_dir),
        **single_node_settings(),
        **({} if quorum is None else replicated_settings(len(quorum.voters))),
        **(sasl_settings() if ports.scram else {}),
        **(ssl_settings(tls) if tls is not None else {}),
    }


def single_node_settings() -> dict[str, str]:
    """Broker settings that make transactions, compaction and share groups work on one node.

    Shared with the testcontainers fallback so both test brokers behave alike."""
    return {
        "num.partitions": "1",
        "default.replication.factor": "1",
        "min.insync.replicas": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "4",
        "group.initial.rebalance.delay.ms": "0",
        # Workers may detect a dead member faster than Kafka's 6 s floor: a retry after a lost lease
        # lands on the dead worker's partition, read again only once the group has noticed.
        "group.min.session.timeout.ms": "1000",
        # After a crash the restarted node may re-register only once its old session expired (default 9 s).
        "broker.session.timeout.ms": "4000",
        # The scheduler's group uses the KIP-848 protocol, whose member session and heartbeat are set here, not
        # by the client: 6 s as the classic groups' session (the failover budget), heartbeats every half second (a
        # survivor hears of a dead member's partitions at its next heartbeat after the session ends).
        "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.session.timeout.ms": "1000",
        "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "500",
        "broker.heartbeat.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "log.cleaner.threads": "1",
        "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
        # Index files of 1 MiB, not 10: each is preallocated sparse and memory-mapped, and its first write
        # faults in up to the disk's read-ahead of zeroed pages (docs/decisions/0003-index-file-size.md).
        "log.index.size.max.bytes": str(1024 * 1024),
    }


def replicated_settings(nodes: int) -> dict[str, str]:
    """Over `single_node_settings` on a cluster of `nodes`: the internal topics (offsets, transaction state,
    share state) and the broker's defaults at min(3, nodes) replicas, with the `min.insync.replicas` the
    project's own topics get (scheduler.kafka.replication), so one node may die without losing or refusing
    a committed offset or transaction marker. The group settings for fast failover stay as on one node."""
    factor = str(min(3, nodes))
    min_isr = str(min_insync_replicas(min(3, nodes)))
    return {
        "default.replication.factor": factor,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": factor,
        "transaction.state.log.replication.factor": factor,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": factor,
        "share.coordinator.state.topic.min.isr": min_isr,
    }


def sasl_settings() -> dict[str, str]:
    """SCRAM on the SASL_PLAINTEXT listener, and ACLs enforced on every listener.

    The PLAINTEXT and CONTROLLER listeners (bound to 127.0.0.1) authenticate nobody, so their
    principal User:ANONYMOUS is a super user: the scheduler, the control plane and the broker's own
    controller traffic are trusted local services. Tenants' workers connect through SASL, where
    their ACLs apply; `SUPER_USER` is the operator's identity on that listener."""
    return {
        "sasl.enabled.mechanisms": SCRAM_MECHANISM,
        f"listener.name.sasl_plaintext.{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "false",
        "super.users": f"User:{SUPER_USER};User:ANONYMOUS",
    }


def ssl_settings(tls: TlsFiles) -> dict[str, str]:
    """The SASL_SSL listener: SCRAM as on SASL_PLAINTEXT, inside TLS with the keytool-made keystore."""
    listener = "listener.name.sasl_ssl."
    return {
        f"{listener}{SCRAM_MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        f"{listener}ssl.keystore.location": str(tls.keystore),
        f"{listener}ssl.keystore.type": "PKCS12",
        f"{listener}ssl.keystore.password": tls.password,
        f"{listener}ssl.key.password": tls.password,
    }
