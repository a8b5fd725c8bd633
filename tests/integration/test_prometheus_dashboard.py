"""The Grafana dashboard's own PromQL, run by a real Prometheus scraping a running scheduler.

Every expression of docs/grafana/scheduler.json is evaluated (none may fail); the lag p99,
backlog and throttling panels must show the burst this test causes: 40 occurrences of a tenant
limited to 5 dispatches/s due at one instant, beside 5 of an unlimited tenant.
"""
from __future__ import annotations

import json
import math
import time
from datetime import datetime, timezone
from pathlib import Path

from engine_harness import SchedulerProcess, TopicReader, ensure_layout, occurrence_topics

from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "scheduler.json"
RATE_INTERVAL = "10s"  # Grafana's $__rate_interval for a 1 s scrape is at least 4 scrapes


def dashboard_queries() -> dict[str, list[str]]:
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return {p["title"]: [t["expr"] for t in p.get("targets", [])] for p in panels if p.get("targets")}


def concrete(expr: str) -> str:
    """The expression as Grafana sends it with instance = All."""
    return expr.replace("$__rate_interval", RATE_INTERVAL).replace("$instance", ".*")


def values(series: list[dict]) -> list[float]:
    return [float(v) for s in series for _, v in s["values"] if not math.isnan(float(v))]


def panel(title_start: str) -> list[str]:
    found = [exprs for title, exprs in dashboard_queries().items() if title.startswith(title_start)]
    assert len(found) == 1, f"one panel titled {title_start!r}..."
    return [concrete(e) for e in found[0]]


def test_dashboard_queries_show_lag_backlog_and_throttling(prometheus, kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, ["slow", "fast"])
    port = free_port()
    process = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "prom",
                               ("--metrics-port", str(port), "--tenant-rate", "slow=5", "--horizon", "10")).start()
    prometheus.scrape(f"127.0.0.1:{port}")
    try:
        owned = prometheus.wait_for('scheduler_owned_partitions{job="scheduler"}',
                                    lambda r: r and float(r[0]["value"][1]) == 8, timeout=90)
        assert owned and float(owned[0]["value"][1]) == 8, process.log_tail()
        instances = prometheus.api("label/instance/values", **{"match[]": "scheduler_owned_partitions"})
        assert f"127.0.0.1:{port}" in instances  # the dashboard's $instance variable

        started = time.time()
        due_ms = (math.ceil(started) + 6) * 1000
        due = datetime.fromtimestamp(due_ms / 1000, tz=timezone.utc).isoformat().replace("+00:00", "Z")
        with SchedulerClient(kafka_bootstrap, unique_prefix) as client:
            ids = [client.send("CREATE", f"slow-{n}", "slow", spec=make_spec("once", due)) for n in range(40)]
            ids += [client.send("CREATE", f"fast-{n}", "fast", spec=make_spec("once", due)) for n in range(5)]
            assert {r["status"] for r in client.wait(ids).values()} == {"ACCEPTED"}
        reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, ["slow", "fast"]), "Occurrence")
        try:
            reader.until(lambda got: len(got) >= 45, timeout=90)
        finally:
            reader.close()
        time.sleep(3)  # a few more scrapes after the last dispatch
        end = time.time()

        for exprs in dashboard_queries().values():
            for expr in exprs:
                prometheus.query_range(concrete(expr), started, end)  # raises unless Prometheus accepts it

        strict_p99, strict_p50, catch_up_p99 = panel("Schedule lag")
        lags = values(prometheus.query_range(strict_p99, started, end))
        # 40 occurrences at 5/s: the last go about 8 s late, the unlimited tenant's at once.
        assert lags and 1.0 <= max(lags) <= 60.0, lags
        assert values(prometheus.query_range(strict_p50, started, end))

        (backlog,) = panel("Due backlog")
        series = prometheus.query_range(backlog, started, end)
        assert len(series) == 8  # one per partition
        assert max(values(series)) >= 1  # the held-back entries waited as backlog

        rate_held, concurrency_held = panel("Tenant throttling")
        held = prometheus.query_range(rate_held, started, end)
        by_tenant = {s["metric"].get("tenant"): max(values([s]), default=0.0) for s in held}
        assert by_tenant.get("slow", 0) > 0 and by_tenant.get("fast", 0) == 0, by_tenant
        prometheus.query_range(concurrency_held, started, end)

        (dispatched,) = panel("Dispatch rate")
        lanes = {s["metric"].get("lane") for s in prometheus.query_range(dispatched, started, end)}
        assert "strict" in lanes
    finally:
        prometheus.scrape()
        process.terminate()
