"""docker-compose.yml cannot run here (no Docker engine): this keeps it consistent with the code instead. Every
scheduler-image service's command parses with the CLI's own parser, the Kafka service has the group settings of
the project's broker (fast failover), each scheduler replica has its own instance id and state volume, and a
worker and an API service are reachable from other containers (bound to 0.0.0.0)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from scheduler.broker.server_properties import single_node_settings
from scheduler.cli import build_parser

COMPOSE = Path(__file__).resolve().parents[2] / "docker-compose.yml"
IMAGE = "kafka-job-scheduler:local"
# The settings a takeover's speed rests on (scheduler.broker.server_properties.single_node_settings).
FAILOVER_SETTINGS = [key for key in single_node_settings() if key.startswith(("group.", "broker."))]


@pytest.fixture(scope="module")
def services() -> dict[str, dict[str, Any]]:
    return yaml.safe_load(COMPOSE.read_text())["services"]


def scheduler_services(services: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: service for name, service in services.items() if service.get("image") == IMAGE}


def parsed(command: list[str]) -> argparse.Namespace:
    try:
        return build_parser().parse_args(command)
    except SystemExit as exc:
        raise AssertionError(f"{command} does not parse: exit {exc.code}") from None


def test_every_command_parses_with_the_cli(services):
    commands = {name: service.get("command", ["run"]) for name, service in scheduler_services(services).items()}
    assert len(commands) >= 5, commands
    for name, command in commands.items():
        assert all(isinstance(word, str) for word in command), f"{name}: quote every word of {command}"
        parsed(command)


def test_the_kafka_service_has_the_failover_settings(services):
    environment = {key: str(value) for key, value in services["kafka"]["environment"].items()}
    for key, value in single_node_settings().items():
        if key in FAILOVER_SETTINGS:
            variable = "KAFKA_" + key.upper().replace(".", "_")
            assert environment.get(variable) == value, f"kafka: {variable} should be {value}"


def test_each_scheduler_replica_has_its_own_instance_id_and_state(services):
    runs = {name: service for name, service in scheduler_services(services).items()
            if service.get("command", ["run"])[0] == "run"}
    assert len(runs) >= 2, "at least two scheduler replicas"
    ids = {name: parsed(service["command"]).instance_id for name, service in runs.items()}
    assert None not in ids.values() and len(set(ids.values())) == len(ids), ids
    volumes = {name: [v.split(":")[0] for v in service.get("volumes", []) if v.endswith(":/var/lib/scheduler")]
               for name, service in runs.items()}
    assert all(len(found) == 1 for found in volumes.values()), volumes
    assert len({found[0] for found in volumes.values()}) == len(runs), f"replicas share a state volume: {volumes}"
    declared = yaml.safe_load(COMPOSE.read_text())["volumes"]
    assert all(found[0] in declared for found in volumes.values())


def test_a_worker_and_an_api_service_listen_on_every_interface(services):
    commands = [service["command"] for service in scheduler_services(services).values() if "command" in service]
    workers = [parsed(c) for c in commands if c[0] == "worker"]
    apis = [parsed(c) for c in commands if c[0] == "api"]
    assert workers and all(w.metrics_bind == "0.0.0.0" and w.metrics_port for w in workers)
    assert apis and all(a.host == "0.0.0.0" for a in apis)
    runs = [parsed(c) for c in commands if c[0] == "run"]
    assert all(r.metrics_bind == "0.0.0.0" and r.metrics_port for r in runs)
