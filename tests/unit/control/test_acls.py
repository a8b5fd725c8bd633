"""The worker ACLs follow the topic layout, by literal name: a prefix would also match a tenant `acme.x`."""
from __future__ import annotations

from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from scheduler.control.acls import worker_acls
from scheduler.wire.topology import Topology


def test_worker_reads_exactly_its_tenants_topics_by_name() -> None:
    topology = Topology.load()
    bindings = worker_acls(topology, "sched", "acme", "worker-acme")
    read = {b.name for b in bindings if b.restype == ResourceType.TOPIC and b.operation == AclOperation.READ}
    written = {b.name for b in bindings if b.restype == ResourceType.TOPIC and b.operation == AclOperation.WRITE}

    assert read == {t.name for t in topology.tenant_topics("sched", "acme")}
    assert written == {topology.topic_name("attempts", "sched")}
    assert {b.principal for b in bindings} == {"User:worker-acme"}
    assert all(b.resource_pattern_type == ResourcePatternType.LITERAL for b in bindings
               if b.restype != ResourceType.TRANSACTIONAL_ID)

