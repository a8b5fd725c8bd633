"""max_concurrency on the real broker: a tenant's running occurrences stay within its quota across
partitions and scheduler processes; what waits is delayed, not dropped; other tenants are not held up."""
from __future__ import annotations

import time

from engine_harness import (
    TOPOLOGY,
    FakeWorker,
    SchedulerProcess,
    TopicReader,
    ensure_layout,
    occurrence_topics,
    scrape,
    soon,
    wait_for_split,
)

from scheduler.broker.local import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.control.tenants import TenantRegistry

QUOTA = 3


def test_running_occurrences_stay_within_max_concurrency_across_processes(kafka_bootstrap, unique_prefix,
                                                                          tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, ["capped", "free"])
    with TenantRegistry(kafka_bootstrap, unique_prefix) as tenants:  # its view's thread would outlive the broker
        tenants.register("capped", max_concurrency=QUOTA)
    ports = {name: free_port() for name in ("a", "b")}
    processes = [SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / f"state-{name}", name,
                                  ("--horizon", "3", "--metrics-port", str(port))).start()
                 for name, port in ports.items()]
    client = SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=60)
    reader = TopicReader(kafka_bootstrap, occurrence_topics(unique_prefix, ["capped", "free"]), "Occurrence")
    worker = FakeWorker(kafka_bootstrap, unique_prefix)
    try:
        wait_for_split(processes, TOPOLOGY.schedule_partitions)
        at = soon(6)
        capped = {f"capped-{n}" for n in range(10)}
        for schedule_id in sorted(capped):
            client.create("capped", make_spec("once", at), schedule_id=schedule_id)
        for n in range(10):
            client.create("free", make_spec("once", at), schedule_id=f"free-{n}")
        assert len({n % TOPOLOGY.schedule_partitions for n in range(10)}) > 1

        def of(tenant: str) -> list[dict]:
            return [r.record for r in reader.received if r.record["tenant"] == tenant]

        reader.until(lambda got: len(of("free")) == 10, 60)
        finished: set[str] = set()
        deadline = time.monotonic() + 120
        while len(finished) < len(capped) and time.monotonic() < deadline:
            reader.poll(3)  # long enough for any slot given back to be used again
            running = [r for r in of("capped") if r["occurrence_id"] not in finished]
            assert len(running) <= QUOTA, f"{len(running)} running at once, quota {QUOTA}"
            assert len(running) == min(QUOTA, len(capped) - len(finished)), "a free slot was left unused"
            for occurrence in running[:2]:
                worker.run(occurrence, "SUCCEEDED")
                finished.add(occurrence["occurrence_id"])
        delivered = of("capped")
        assert {r["schedule_id"] for r in delivered} == capped, "every held-back occurrence was sent in the end"
        assert len(delivered) == len(capped), "none twice"
        assert max(r["scheduled_for_ms"] for r in delivered) == min(r["scheduled_for_ms"] for r in delivered)
        held = [scrape(port).get(("scheduler_tenant_concurrency_held_back_total", (("tenant", "capped"),)), 0)
                for port in ports.values()]
        assert sum(held) > 0, "the hold-backs are counted"
        assert all(scrape(port).get(("scheduler_tenant_concurrency_held_back_total", (("tenant", "free"),))) is None
                   for port in ports.values())
    finally:
        client.close()
        reader.close()
        for process in processes:
            if process.alive():
                process.terminate()
