"""Caller's client settings go under a client's own, never silently replace them."""
from __future__ import annotations

import pytest

from scheduler.kafka.clients import client_settings, connection


def test_connection_adds_the_bootstrap_and_refuses_a_different_one():
    sasl = {"bootstrap.servers": "127.0.0.1:9094", "security.protocol": "SASL_PLAINTEXT"}

    assert connection("127.0.0.1:9094", None) == {"bootstrap.servers": "127.0.0.1:9094"}
    assert connection("127.0.0.1:9094", sasl) == sasl
    with pytest.raises(ValueError, match="127.0.0.1:9092"):
        connection("127.0.0.1:9092", sasl)


def test_client_settings_keep_the_clients_own_and_refuse_to_override_them():
    caller = {"bootstrap.servers": "b:9094", "sasl.username": "worker-acme"}

    assert client_settings(caller, {"isolation.level": "read_committed"}) == {
        "log_level": 4, "bootstrap.servers": "b:9094", "sasl.username": "worker-acme",
        "isolation.level": "read_committed"}
    assert client_settings({**caller, "log_level": 7}, {})["log_level"] == 7
    with pytest.raises(ValueError, match="isolation.level"):
        client_settings({**caller, "isolation.level": "read_uncommitted"}, {"isolation.level": "read_committed"})
