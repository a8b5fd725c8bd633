"""Encryption in transit, for real: a broker with a SASL_SSL listener (certificate made by keytool at
start) that the scheduler, a worker and the client use end to end, and `scheduler api` over HTTPS.
A plaintext client of either TLS port fails, with an error that says so."""
from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from api_harness import ApiServer
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from engine_harness import REPO, SchedulerProcess, ensure_layout
from worker_harness import WorkerProcess, handled, status_of

from helpers.waiting import wait_until
from scheduler.broker.local import SUPER_USER, LocalBroker, free_port
from scheduler.control.acls import scram_client_config
from scheduler.control.client import SchedulerClient, Unavailable, make_spec

TENANT = "tls"


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory) -> Iterator[LocalBroker]:
    broker = LocalBroker(tmp_path_factory.mktemp("kafka-tls"), port=free_port(), controller_port=free_port(),
                         ssl_port=free_port())
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def ssl_config(broker: LocalBroker) -> dict[str, str]:
    assert broker.ssl_bootstrap is not None
    conf = scram_client_config(broker.ssl_bootstrap, SUPER_USER, broker.admin_password())
    conf.pop("bootstrap.servers")
    return {**conf, "security.protocol": "SASL_SSL", "ssl.ca.location": str(broker.ca_file)}


def test_the_scheduler_a_worker_and_the_client_round_trip_over_sasl_ssl(tls_broker, tmp_path):
    # Every process is given the SASL_SSL address only; the broker advertises that listener's own address
    # back, so all their traffic is encrypted (the PLAINTEXT port only creates the topics).
    bootstrap, conf = tls_broker.ssl_bootstrap, ssl_config(tls_broker)
    assert bootstrap is not None
    prefix = "tls1"
    ensure_layout(tls_broker.bootstrap, prefix, [TENANT])
    config_file = tmp_path / "client.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    scheduler = SchedulerProcess(bootstrap, prefix, tmp_path / "state", "tls", ("--horizon", "3",
                                 "--client-config", str(config_file))).start()
    worker = WorkerProcess(bootstrap, prefix, TENANT, "worker_handlers:record", tmp_path / "work",
                           extra_args=("--client-config", str(config_file))).start()
    try:
        with SchedulerClient(bootstrap, prefix, timeout_s=60, client_config=conf) as client:
            now = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=4)
            client.create(TENANT, make_spec("once", now.isoformat().replace("+00:00", "Z")), schedule_id="enc")
            wait_until(lambda: handled(tmp_path / "work"), 90, "the occurrence through SASL_SSL")
            oid = handled(tmp_path / "work")[0]["occurrence_id"]
            wait_until(lambda: status_of(client, TENANT, oid).get("state") == "SUCCEEDED", 30, "SUCCEEDED")
    finally:
        worker.stop_quietly()
        scheduler.terminate()


def test_a_plaintext_client_of_the_sasl_ssl_port_fails_clearly(tls_broker):
    assert tls_broker.ssl_bootstrap is not None
    with pytest.raises(Unavailable) as refused:
        SchedulerClient(tls_broker.ssl_bootstrap, "tls1", timeout_s=10)
    assert "cannot reach the cluster" in refused.value.message
    assert "security.protocol" in refused.value.message, refused.value.message


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_file, key_file = directory / "api.pem", directory / "api.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_file, key_file


def test_the_api_serves_https_and_a_plain_http_request_to_it_fails(kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix)
    cert, key = self_signed(tmp_path)
    server = ApiServer(kafka_bootstrap, unique_prefix, tmp_path / "api.log", "--tls-cert", str(cert),
                       "--tls-key", str(key))
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        server.wait_ready("https", verify=trust)
        answer = httpx.get(server.url("https") + "/v1/tenants", headers={"Authorization": "Bearer sk_x_y"},
                           verify=trust, timeout=10)
        assert answer.status_code == 401 and answer.json()["code"] == "UNAUTHENTICATED"
        with pytest.raises(httpx.TransportError):
            httpx.get(server.url("http") + "/v1/tenants", timeout=10)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(server.url("https") + "/v1/tenants", timeout=10)  # the system CAs do not know it
    finally:
        server.stop()


def test_every_kafka_command_reaches_a_sasl_ssl_only_cluster_with_client_config(tls_broker, tmp_path):
    """Each command is given the SASL_SSL address only, and --client-config (or $SCHEDULER_CLIENT_CONFIG) with
    the listener's settings; without them the same command cannot reach the cluster (exit 6)."""
    bootstrap = tls_broker.ssl_bootstrap
    assert bootstrap is not None
    prefix = "tls2"
    config_file = tmp_path / "client.properties"
    config_file.write_text("".join(f"{k}={v}\n" for k, v in ssl_config(tls_broker).items()))
    flag = ("--client-config", str(config_file))
    env = {"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix}
    from_env = {**env, "SCHEDULER_CLIENT_CONFIG": str(config_file)}

    def scheduler(*args: str, environ: dict[str, str] = env, timeout: str = "30s") -> tuple[int, str]:
        run = subprocess.run([sys.executable, "-m", "scheduler", *args], cwd=REPO, capture_output=True, text=True,
                             timeout=120, env={**os.environ, **environ})
        return run.returncode, run.stdout + run.stderr

    code, out = scheduler("topics", "ensure", *flag)
    assert code == 0, out
    code, out = scheduler("doctor", "--tenant", TENANT, *flag)
    assert out.startswith(f"OK broker: {bootstrap} answers"), out
    # `run` takes the file from the environment; the control commands get their results from it.
    process = SchedulerProcess(bootstrap, prefix, tmp_path / "state", "tls2", ("--horizon", "3"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SCHEDULER_CLIENT_CONFIG", str(config_file))
        process.start()
    api = ApiServer(bootstrap, prefix, tmp_path / "api.log", *flag)
    try:
        code, out = scheduler("tenants", "register", TENANT, *flag)
        assert code == 0, out
        code, out = scheduler("schedules", "create", "--tenant", TENANT, "--cron", "0 * * * *", "--tz", "UTC",
                              "--id", "hourly", *flag)
        assert code == 0, out
        code, out = scheduler("schedules", "list", "--tenant", TENANT, "--json", environ=from_env)
        assert code == 0 and "hourly" in out, out
        code, out = scheduler("tenants", "get", TENANT, environ=from_env)
        assert code == 0, out
        code, out = scheduler("occurrences", "get", "--tenant", TENANT, "no-such-occurrence", *flag)
        assert code == 3, out  # connected, and the occurrence is not known
        code, out = scheduler("api", "keys", "create", "--admin", *flag)
        assert code == 0, out
        key = out.splitlines()[0]
        api.wait_ready()
        listed = httpx.get(api.url() + f"/v1/tenants/{TENANT}/schedules", headers={"Authorization": f"Bearer {key}"},
                           timeout=30)
        assert listed.status_code == 200 and "hourly" in listed.text, listed.text
        code, out = scheduler("tenants", "list", "--timeout", "5s")
        assert code == 6, out
    finally:
        api.stop()
        process.terminate()
