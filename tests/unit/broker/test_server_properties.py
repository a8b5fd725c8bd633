"""The local broker's server.properties as a function of its ports: which listeners exist, and that
ACLs and SCRAM come exactly with a SASL port."""
from pathlib import Path

from scheduler.broker.server_properties import SUPER_USER, Listeners, Quorum, server_settings, single_node_settings
from scheduler.broker.tls import TlsFiles


def test_without_sasl_ports_only_the_trusted_listeners_exist_and_no_acls_are_enforced() -> None:
    settings = server_settings(Listeners(9092, 9093), Path("/d/kraft"), None)
    assert settings["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert settings["advertised.listeners"] == settings["listeners"]
    assert settings["listener.security.protocol.map"] == "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT"
    assert settings["log.dirs"] == settings["metadata.log.dir"] == "/d/kraft"
    assert "authorizer.class.name" not in settings and "sasl.enabled.mechanisms" not in settings


def test_a_sasl_port_adds_its_listener_scram_and_acls_with_the_local_services_as_super_users() -> None:
    settings = server_settings(Listeners(9092, 9093, sasl_port=9094), Path("/d/kraft"), None)
    assert settings["listeners"].endswith(",SASL_PLAINTEXT://127.0.0.1:9094")
    assert "SASL_PLAINTEXT:SASL_PLAINTEXT" in settings["listener.security.protocol.map"]
    assert settings["allow.everyone.if.no.acl.found"] == "false"
    assert settings["super.users"] == f"User:{SUPER_USER};User:ANONYMOUS"
    assert not any(key.startswith("listener.name.sasl_ssl.") for key in settings)


def test_an_ssl_port_alone_still_enforces_acls_and_points_its_listener_at_the_keystore() -> None:
    tls = TlsFiles(Path("/d/tls/broker.p12"), "secret", Path("/d/tls/ca.pem"))
    settings = server_settings(Listeners(9092, 9093, ssl_port=9095), Path("/d/kraft"), tls)
    assert settings["listeners"].endswith(",SASL_SSL://127.0.0.1:9095")
    assert "SASL_PLAINTEXT" not in settings["listeners"]
    assert settings["authorizer.class.name"].endswith("StandardAuthorizer")
    assert settings["listener.name.sasl_ssl.ssl.keystore.location"] == "/d/tls/broker.p12"
    assert settings["listener.name.sasl_ssl.ssl.key.password"] == "secret"


def test_a_cluster_node_has_its_id_a_static_quorum_and_replicated_internal_topics() -> None:
    quorum = Quorum(2, ((1, 9093), (2, 9095), (3, 9097)))
    settings = server_settings(Listeners(9094, 9095), Path("/data/kraft"), None, quorum)
    assert settings["node.id"] == "2"
    assert settings["controller.quorum.voters"] == "1@127.0.0.1:9093,2@127.0.0.1:9095,3@127.0.0.1:9097"
    assert "controller.quorum.bootstrap.servers" not in settings
    for key in ("default.replication.factor", "offsets.topic.replication.factor",
                "transaction.state.log.replication.factor", "share.coordinator.state.topic.replication.factor"):
        assert settings[key] == "3", key
    for key in ("min.insync.replicas", "transaction.state.log.min.isr", "share.coordinator.state.topic.min.isr"):
        assert settings[key] == "2", key
    # The fast-failover group settings are the single node's.
    assert {k: v for k, v in settings.items() if k.startswith("group.")} == \
        {k: v for k, v in single_node_settings().items() if k.startswith("group.")}


def test_cluster_ports_follow_the_base_port() -> None:
    from scheduler.broker.cluster import NodePorts, default_ports

    assert default_ports(9092, 3) == [NodePorts(9092, 9093), NodePorts(9094, 9095), NodePorts(9096, 9097)]
