"""A local Kafka cluster of N nodes (KRaft, each node a controller and a broker), from the same jars and
code as the single-node dev broker: the shape a replicated deployment has, small enough for this machine,
so tests and the game day can kill one broker and see nothing lost.

Its data dir holds `cluster.properties` (node count and each node's ports) and one data dir per node
(`node-1`, `node-2`, ...), each an ordinary LocalBroker data dir with the same cluster id."""
from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from scheduler.broker.jvm_process import read_properties
from scheduler.broker.local import JVM_OPTS, START_TIMEOUT_S, BrokerError, LocalBroker, new_cluster_id
from scheduler.broker.ports import HOST
from scheduler.broker.server_properties import Quorum

LAYOUT_FILE = "cluster.properties"
# Three JVMs share a small machine: each gets a fifth of the single node's heap ceiling.
NODE_JVM_OPTS = ("-Xmx384m", "-Xms128m", *(opt for opt in JVM_OPTS if not opt.startswith("-Xm")))
MAX_NODES = 9


class ClusterNode(LocalBroker):
    """One node of a LocalCluster: a LocalBroker with a static quorum and a smaller heap."""

    jvm_opts = NODE_JVM_OPTS

    def __init__(self, data_dir: Path, port: int, controller_port: int, quorum: Quorum) -> None:
        super().__init__(data_dir, port, controller_port)
        self.quorum = quorum


@dataclass(frozen=True)
class NodePorts:
    port: int
    controller_port: int


def default_ports(base: int, nodes: int) -> list[NodePorts]:
    """Node N (from 1) listens on base + 2(N-1) and its controller on the port after: 9092/9093, 9094/9095, ..."""
    return [NodePorts(base + 2 * i, base + 2 * i + 1) for i in range(nodes)]


class LocalCluster:
    """N ClusterNodes started together; `node(n)` is one of them, to kill (-9) and start again in tests."""

    def __init__(self, data_dir: Path, ports: list[NodePorts]) -> None:
        if not 2 <= len(ports) <= MAX_NODES:
            raise BrokerError(f"a local cluster has 2 to {MAX_NODES} nodes, not {len(ports)} (one node: omit --nodes)")
        numbers = [number for pair in ports for number in (pair.port, pair.controller_port)]
        if len(set(numbers)) != len(numbers):
            raise BrokerError(f"the cluster's ports must all differ: {numbers}")
        self.data_dir = Path(data_dir).resolve()
        self.ports = list(ports)
        voters = tuple((n, pair.controller_port) for n, pair in enumerate(self.ports, start=1))
        self.nodes = [ClusterNode(self.data_dir / f"node-{n}", pair.port, pair.controller_port, Quorum(n, voters))
                      for n, pair in enumerate(self.ports, start=1)]

    @classmethod
    def from_data_dir(cls, data_dir: Path) -> LocalCluster | None:
        """The cluster last started from `data_dir`, or None when it holds none."""
        layout = read_properties(Path(data_dir) / LAYOUT_FILE)
        if "nodes" not in layout:
            return None
        count = int(layout["nodes"])
        pairs = [layout[f"node.{n}"].split(",") for n in range(1, count + 1)]
        return cls(data_dir, [NodePorts(int(port), int(controller)) for port, controller in pairs])

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    def node(self, number: int) -> ClusterNode:
        """Node `number`, counted from 1 as node.id is."""
        if not 1 <= number <= len(self.nodes):
            raise BrokerError(f"there is no node {number}: the cluster in {self.data_dir} "
                              f"has nodes 1..{len(self.nodes)}")
        return self.nodes[number - 1]

    def is_running(self) -> bool:
        return any(node.is_running() for node in self.nodes)

    def start(self, timeout: float = START_TIMEOUT_S) -> str:
        """Launch every node that is not running, then wait until each answers and all brokers are registered."""
        self._check_layout_fits()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id = self._cluster_id()
        self._write_layout()
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            node.data_dir.mkdir(parents=True, exist_ok=True)
            (node.data_dir / "cluster.id").write_text(cluster_id + "\n")
            node.launch()
        for node in self.nodes:
            node.wait_ready(max(1.0, deadline - time.monotonic()))
        self.wait_for_brokers(len(self.nodes), max(1.0, deadline - time.monotonic()))
        return self.bootstrap

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop every node at once (SIGTERM, SIGKILL after `timeout`); whether any ran. One after another, the
        last node would wait for a quorum that is gone until its timeout; together, they shut down in seconds."""
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            return any(list(pool.map(lambda node: node.stop(timeout), self.nodes)))

    def wipe(self) -> None:
        if self.is_running():
            raise BrokerError(f"the cluster in {self.data_dir} is running: stop it before wiping its data")
        for node in self.nodes:
            node.wipe()
            if node.data_dir.is_dir() and not any(node.data_dir.iterdir()):
                node.data_dir.rmdir()
        (self.data_dir / LAYOUT_FILE).unlink(missing_ok=True)
        (self.data_dir / "cluster.id").unlink(missing_ok=True)

    def wait_for_brokers(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        """Until the metadata lists `count` live brokers (after a restart, until the node has re-registered)."""
        self._wait_for_brokers(lambda seen: seen >= count, f"at least {count}", timeout)

    def wait_for_brokers_at_most(self, count: int, timeout: float = START_TIMEOUT_S) -> None:
        """Until the metadata lists at most `count` live brokers: after a kill, until the controller has fenced
        the dead one (broker.session.timeout.ms) and moved its partitions' leadership to the others."""
        self._wait_for_brokers(lambda seen: 0 < seen <= count, f"at most {count}", timeout)

    def _wait_for_brokers(self, enough: Callable[[int], bool], wanted: str, timeout: float) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 3})
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            try:
                seen = len(admin.list_topics(timeout=2).brokers)
            except KafkaException:
                seen = 0
            if enough(seen):
                return
            time.sleep(0.2)
        raise BrokerError(f"the cluster in {self.data_dir} lists {seen} brokers, not {wanted}, after {timeout:.0f}s; "
                          f"see the nodes' logs in {self.data_dir}/node-*/logs")

    def _cluster_id(self) -> str:
        path = self.data_dir / "cluster.id"
        if not path.exists():
            path.write_text(new_cluster_id() + "\n")
        return path.read_text().strip()

    def _check_layout_fits(self) -> None:
        """Formatted nodes remember their quorum: another node count or other ports need --wipe."""
        previous = LocalCluster.from_data_dir(self.data_dir)
        if previous is not None and previous.ports != self.ports and (self.data_dir / "node-1" / "kraft").exists():
            raise BrokerError(
                f"the cluster in {self.data_dir} was formatted with {len(previous.nodes)} nodes on ports "
                f"{[p.port for p in previous.ports]}: start it the same way, or add --wipe to start afresh")

    def _write_layout(self) -> None:
        lines = [f"nodes={len(self.nodes)}\n", *(f"node.{n}={pair.port},{pair.controller_port}\n"
                                                 for n, pair in enumerate(self.ports, start=1))]
        (self.data_dir / LAYOUT_FILE).write_text(
            "# written by `scheduler broker start --nodes N`; read by stop, status, kill and restart\n"
            + "".join(lines))

    def describe(self) -> list[str]:
        """One status line per node: `node N pid=P bootstrap=HOST:PORT` or `node N stopped`."""
        lines = []
        for number, node in enumerate(self.nodes, start=1):
            pid = node.pid()
            state = "stopped" if pid is None else f"pid={pid}"
            lines.append(f"node {number} {state} bootstrap={HOST}:{node.port} data_dir={node.data_dir}")
        return lines
