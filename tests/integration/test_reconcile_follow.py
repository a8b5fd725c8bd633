"""`scheduler reconcile --follow` on a real scheduler whose dispatches the real Connect sinks write into
the ledger (tests/fixtures_audit.py): one dispatch of one schedule never lands (a trigger drops that row
as a lost write would), and the online reconciler names it ABSENT within --settle + one --window of its
instant, counts it on its metrics port, and keeps reconciling the other schedule's windows meanwhile.
The settle time must exceed the sink's delay: an ABSENT for a row the sink wrote later is checked as such."""
from __future__ import annotations

import math
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.request

import psycopg
from engine_harness import REPO, SchedulerProcess, ensure_layout, rfc3339
from reconcile_env import TENANT

from scheduler.broker.ports import free_port
from scheduler.control.client import SchedulerClient, make_spec
from scheduler.timing.instants import to_datetime
from scheduler.timing.occurrence_id import occurrence_id

SETTLE_MS, WINDOW_MS = 12_000, 2_000
MARGIN_MS = 8_000  # the window's own reconcile and the ledger rows' COPY on a loaded 2-core machine


def metric(port: int, line_start: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = [line for line in text.splitlines() if line.startswith(line_start)]
    return float(found[0].rsplit(" ", 1)[1]) if found else None


def test_follow_names_a_lost_dispatch_within_settle_and_one_window(kafka_bootstrap, unique_prefix, audit_ledger,
                                                                    tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix, [TENANT])
    anchor = math.floor(time.time()) * 1000
    scheduler = SchedulerProcess(kafka_bootstrap, unique_prefix, tmp_path / "state", "a", ("--horizon", "5")).start()
    port = free_port()
    env = {**os.environ, "AUDIT_DATABASE_URL": audit_ledger.database_url, "SCHEDULER_TOPIC_PREFIX": unique_prefix}
    follow = subprocess.Popen(
        [sys.executable, "-m", "scheduler", "reconcile", "--follow", "--tenant", TENANT, "--from", rfc3339(anchor),
         "--settle", f"{SETTLE_MS}ms", "--window", f"{WINDOW_MS}ms", "--metrics-port", str(port)],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=open(tmp_path / "follow.log", "wb"), text=True)
    lines: queue.Queue[tuple[float, str]] = queue.Queue()
    threading.Thread(target=lambda: [lines.put((time.time(), line)) for line in follow.stdout], daemon=True).start()
    try:
        with SchedulerClient(kafka_bootstrap, unique_prefix, timeout_s=90) as client:
            client.create(TENANT, make_spec("rate", "every 1s", anchor_at_ms=anchor), schedule_id="steady")
            client.create(TENANT, make_spec("rate", "every 2s", anchor_at_ms=anchor), schedule_id="victim")
        # A fire of `victim` (every 2 s) far enough ahead that its row cannot have reached the sink yet.
        victim_at = anchor + 2000 * math.ceil((time.time() * 1000 + 6000 - anchor) / 2000)
        victim = occurrence_id("victim", 1, to_datetime(victim_at))
        with psycopg.connect(audit_ledger.database_url) as conn:  # the lost write: the row never lands
            conn.execute(f"CREATE FUNCTION {audit_ledger.schema}.lose_one() RETURNS trigger LANGUAGE plpgsql AS $$ "
                         f"BEGIN IF NEW.occurrence_id = '{victim}' THEN RETURN NULL; END IF; RETURN NEW; END $$")
            conn.execute(f"CREATE TRIGGER lose_one BEFORE INSERT ON {audit_ledger.schema}.dispatches FOR EACH ROW "
                         f"EXECUTE FUNCTION {audit_ledger.schema}.lose_one()")
        deadline = (victim_at + SETTLE_MS + WINDOW_MS + MARGIN_MS) / 1000
        absent: dict[str, tuple[float, str]] = {}
        while victim not in absent:
            assert time.time() < deadline, f"no ABSENT line by the deadline: {(tmp_path / 'follow.log').read_text()}"
            assert follow.poll() is None and scheduler.alive(), (tmp_path / "follow.log").read_text()
            try:
                seen, line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line.startswith("ABSENT "):
                absent[line.split()[1]] = (seen, line)
        seen, line = absent.pop(victim)
        assert "schedule=victim" in line and (seen * 1000 - victim_at) <= SETTLE_MS + WINDOW_MS + MARGIN_MS, line
        # Any other ABSENT is a row the sink wrote later than --settle (a loaded machine): it must be there now.
        if absent:
            audit_ledger.wait_for("SELECT count(DISTINCT occurrence_id) FROM {s}.dispatches WHERE occurrence_id = "
                                  "ANY(%s)", lambda rows: rows[0][0] == len(absent), 30, (list(absent),))
        assert metric(port, f'scheduler_reconcile_absent_total{{tenant="{TENANT}"}}') >= 1 + len(absent)
        assert metric(port, f'scheduler_reconcile_expected_total{{classification="ENQUEUED",tenant="{TENANT}"}}') > 5
        window_end = f'scheduler_reconcile_window_end_seconds{{tenant="{TENANT}"}}'
        while (metric(port, window_end) or 0) * 1000 <= victim_at:  # and goes on past the victim's window
            assert time.time() < deadline + WINDOW_MS / 1000, "the reconciler stopped after the finding"
            time.sleep(0.2)
    finally:
        follow.terminate()
        follow.wait(30)
        scheduler.terminate()
    assert follow.returncode == 0
