"""The local broker's server.properties as a function of its ports: which listeners exist, and that
ACLs and SCRAM come exactly with a SASL port."""
from pathlib import Path

from scheduler.broker.server_properties import SUPER_USER, Listeners, server_settings
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
