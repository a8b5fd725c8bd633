"""Handler import paths, the CLI's options, and share-group acknowledgements."""
from __future__ import annotations

import pytest
from confluent_kafka import AcknowledgeType

from scheduler.cli import build_parser, main
from scheduler.worker.cli import client_config, load_handler, read_client_config
from scheduler.worker.share import acknowledgement


def test_load_handler_resolves_module_and_attribute_paths():
    assert load_handler("os.path:join")("a", "b") == "a/b"
    assert load_handler("scheduler.worker.cli:load_handler") is load_handler
    for bad in ("os.path", ":join", "os.path:"):
        with pytest.raises(ValueError):
            load_handler(bad)
    with pytest.raises(TypeError):
        load_handler("os:sep")


def test_worker_command_parses_its_options():
    args = build_parser().parse_args(["worker", "--tenant", "acme", "--handler", "m:f", "--share",
                                      "--priority", "high", "--priority", "low"])
    assert (args.tenant, args.handler_path, args.share, args.priorities) == ("acme", "m:f", True, ["high", "low"])
    assert callable(args.handler)


def worker_args(*extra: str):
    return build_parser().parse_args(["worker", "--tenant", "acme", "--handler", "m:f", *extra])


def test_sasl_options_give_scram_settings_with_the_password_from_the_environment(monkeypatch):
    monkeypatch.setenv("ACME_WORKER_PASSWORD", "s3cret")
    args = worker_args("--sasl-user", "worker-acme", "--sasl-password-env", "ACME_WORKER_PASSWORD")

    assert client_config(args, "127.0.0.1:9094") == {
        "bootstrap.servers": "127.0.0.1:9094", "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "worker-acme", "sasl.password": "s3cret"}
    assert client_config(worker_args(), "127.0.0.1:9092") == {}


def test_client_config_file_holds_key_value_lines_and_adds_to_the_sasl_options(monkeypatch, tmp_path):
    monkeypatch.setenv("ACME_WORKER_PASSWORD", "s3cret")
    path = tmp_path / "client.properties"
    path.write_text("# from the platform team\n\nsocket.keepalive.enable = true\nclient.rack=eu-1a\n")

    assert read_client_config(path) == {"socket.keepalive.enable": "true", "client.rack": "eu-1a"}
    conf = client_config(worker_args("--client-config", str(path), "--sasl-user", "u",
                                     "--sasl-password-env", "ACME_WORKER_PASSWORD"), "b:9094")
    assert conf["client.rack"] == "eu-1a" and conf["sasl.username"] == "u"

    path.write_text("security.protocol=SASL_SSL\nssl.ca.location=/etc/ssl/ca.pem\n")
    conf = client_config(worker_args("--client-config", str(path), "--sasl-user", "u",
                                     "--sasl-password-env", "ACME_WORKER_PASSWORD"), "b:9094")
    assert (conf["security.protocol"], conf["sasl.mechanism"], conf["sasl.password"]) == (
        "SASL_SSL", "SCRAM-SHA-512", "s3cret")
    for clashing, reason in (("sasl.mechanism=PLAIN", "sasl.mechanism"), ("security.protocol=SSL", "needs")):
        path.write_text(f"client.rack=eu-1a\n{clashing}\n")
        with pytest.raises(ValueError, match=reason):
            client_config(worker_args("--client-config", str(path), "--sasl-user", "u",
                                      "--sasl-password-env", "ACME_WORKER_PASSWORD"), "b:9094")
    path.write_text("client.rack=eu-1a\nno value here\n")
    with pytest.raises(ValueError, match=r"client.properties:2: expected key=value"):
        read_client_config(path)


@pytest.mark.parametrize(("extra", "reason"), [
    (("--sasl-user", "worker-acme", "--sasl-password-env", "NO_SUCH_PASSWORD_VARIABLE"),
     "$NO_SUCH_PASSWORD_VARIABLE is empty or not set"),
    (("--sasl-user", "worker-acme"), "--sasl-user and --sasl-password-env go together"),
    (("--client-config", "/nonexistent/client.properties"), "No such file"),
])
def test_worker_command_with_unusable_client_settings_exits_2_before_connecting(monkeypatch, capsys, extra, reason):
    monkeypatch.delenv("NO_SUCH_PASSWORD_VARIABLE", raising=False)

    assert main(["worker", "--tenant", "acme", "--handler", "os.path:join", *extra]) == 2
    message = capsys.readouterr().err
    assert message.startswith("scheduler worker: ") and reason in message


@pytest.mark.parametrize(("kind", "retryable", "ack"), [
    ("SUCCEEDED", False, AcknowledgeType.ACCEPT),
    ("SKIPPED_STALE", False, AcknowledgeType.ACCEPT),
    ("FAILED", True, AcknowledgeType.ACCEPT),
    ("FAILED", False, AcknowledgeType.REJECT),
])
def test_share_acknowledgement_follows_the_recorded_outcome(kind, retryable, ack):
    assert acknowledgement({"kind": kind, "retryable": retryable}) == ack
