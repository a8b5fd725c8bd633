"""`scheduler doctor` against the session broker: each broken setup it can be shown cheaply is reported as a FAIL
line naming the fix, with exit 1; a complete layout passes; an unreachable broker exits 6."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from engine_harness import REPO, ensure_layout

from helpers.closed_ports import closed_address

pytestmark = pytest.mark.integration


def doctor(bootstrap: str, prefix: str, *args: str, **env: str) -> tuple[int, list[str]]:
    run = subprocess.run([sys.executable, "-m", "scheduler", "doctor", *args], cwd=REPO, capture_output=True,
                         text=True, timeout=120,
                         env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "SCHEDULER_TOPIC_PREFIX": prefix,
                              **env})
    lines = run.stdout.splitlines()
    assert all(line.split(" ", 1)[0] in ("OK", "WARN", "FAIL") for line in lines), run.stdout + run.stderr
    return run.returncode, lines


def line(lines: list[str], name: str) -> str:
    return next(text for text in lines if text.split(" ", 1)[1].startswith(f"{name}:"))


def test_missing_topics_fail_and_name_topics_ensure(kafka_bootstrap, unique_prefix):
    code, lines = doctor(kafka_bootstrap, unique_prefix)
    assert code == 1
    assert line(lines, "topics").startswith("FAIL topics: 12 of 12 topics missing")
    assert "(fix: scheduler topics ensure)" in line(lines, "topics")
    assert line(lines, "broker").startswith("OK broker:")
    assert line(lines, "failover").startswith("OK failover:")  # the project's broker sets the group settings


def test_a_complete_layout_passes_and_a_tenant_without_topics_fails(kafka_bootstrap, unique_prefix):
    ensure_layout(kafka_bootstrap, unique_prefix, ["acme"])
    code, lines = doctor(kafka_bootstrap, unique_prefix, "--tenant", "acme")
    assert code == 0, lines
    assert line(lines, "tenant acme topics") == "OK tenant acme topics: 5 topics present"
    code, lines = doctor(kafka_bootstrap, unique_prefix, "--tenant", "nobody")
    assert code == 1
    assert "(fix: scheduler tenants register nobody)" in line(lines, "tenant nobody topics")


def test_topics_below_the_replication_factor_fail(kafka_bootstrap, unique_prefix):
    ensure_layout(kafka_bootstrap, unique_prefix)
    code, lines = doctor(kafka_bootstrap, unique_prefix, SCHEDULER_REPLICATION_FACTOR="2")
    assert code == 1
    assert line(lines, "replication").startswith("FAIL replication: below replication factor 2:")


def test_an_unreachable_broker_exits_6():
    code, lines = doctor(closed_address(), "any", "--timeout", "3s")
    assert code == 6
    assert lines[0].startswith("FAIL broker:")
