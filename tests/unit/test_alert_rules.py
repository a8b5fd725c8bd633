"""docs/prometheus/alerts.yml: valid rules (`promtool check rules`), alerts that fire when they should and
not otherwise (`promtool test rules` on alerts_test.yml), over metrics the processes really export.

promtool comes with Debian's prometheus package, which `make test` installs (`make system-deps`): a
missing promtool fails here rather than skipping, or the rules would go untested unnoticed."""
from __future__ import annotations

import shutil
import subprocess

import pytest
from docs_mentions import METRIC, REPO, metric_names

RULES = REPO / "docs" / "prometheus" / "alerts.yml"
RULE_TESTS = REPO / "docs" / "prometheus" / "alerts_test.yml"
PROMTOOL = "/usr/bin/promtool"


def promtool(*args: str) -> str:
    if shutil.which(PROMTOOL) is None:
        pytest.fail("promtool is required: `make system-deps` installs Debian's prometheus package")
    done = subprocess.run([PROMTOOL, *args], capture_output=True, text=True, timeout=60, cwd=RULES.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_the_rules_are_valid() -> None:
    assert "SUCCESS: 9 rules found" in promtool("check", "rules", str(RULES))


def test_every_alert_fires_when_it_should_and_not_otherwise() -> None:
    promtool("test", "rules", str(RULE_TESTS))


def test_every_alert_has_a_promtool_test() -> None:
    alerts = {line.split(":", 1)[1].strip() for line in RULES.read_text().splitlines()
              if line.strip().startswith("- alert:")}
    tested = {line.split(":", 1)[1].strip() for line in RULE_TESTS.read_text().splitlines()
              if line.strip().startswith("alertname:")}
    assert alerts and alerts == tested


def test_the_rules_query_metrics_the_processes_export() -> None:
    """Comments may name what is not exported yet; the rules themselves may not."""
    rules = [line for line in RULES.read_text().splitlines() if not line.lstrip().startswith("#")]
    assert sorted({name for line in rules for name in METRIC.findall(line)} - metric_names()) == []
