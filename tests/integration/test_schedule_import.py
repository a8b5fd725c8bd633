"""`scheduler schedules import` and `SchedulerClient.create_many` on the real broker and a strict engine."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from control_env import control_env, hourly
from engine_harness import REPO, ensure_layout

from conftest import delete_topics
from scheduler.control.bulk import CreateRequest
from scheduler.control.client import make_spec
from scheduler.control.command_record import command_record
from scheduler.wire.partitioning import partition_for


@pytest.fixture(scope="module")
def env(kafka_bootstrap, tmp_path_factory):
    yield from control_env(kafka_bootstrap, tmp_path_factory.mktemp("import"))


def run_import(env, path: str, stdin: str | None = None, *args: str,
               prefix: str | None = None) -> tuple[int, dict | None]:
    run = subprocess.run([sys.executable, "-m", "scheduler", "schedules", "import", path, "--json", *args],
                         cwd=REPO, capture_output=True, text=True, timeout=180, input=stdin,
                         env={**os.environ, "KAFKA_BOOTSTRAP_SERVERS": env.bootstrap,
                              "SCHEDULER_TOPIC_PREFIX": prefix or env.prefix})
    return run.returncode, json.loads(run.stdout) if run.stdout.strip() else None


def line(tenant: str, expression: str, **fields) -> str:
    spec = {"kind": fields.pop("kind", "CRON"), "expression": expression, **fields.pop("spec", {})}
    return json.dumps({"tenant": tenant, "spec": spec, **fields})


def test_import_reports_every_bad_line_and_imports_the_rest_once(env, tmp_path: Path):
    capped = f"capped{uuid.uuid4().hex[:6]}"
    env.plane.tenants.register(capped, max_active_schedules=2)
    lines = [
        line("acme", "0 9 * * MON-FRI", spec={"time_zone": "Asia/Tokyo"}),          # 1
        line("acme", "0 2 * * *", schedule_id="imp-nightly", spec={"payload": "{}"}),  # 2
        line("acme", "0 99 * * *"),                                                  # 3 bad cron
        "",                                                                          # 4 blank: skipped
        line("acme", "0 9 * * *", spec={"time_zone": "Mars/Olympus"}),               # 5 unknown zone
        line("nobody", "0 9 * * *"),                                                 # 6 unknown tenant
        line("acme", "0 2 * * *", schedule_id="imp-nightly", spec={"payload": "{}"}),  # 7 duplicate of 2
        "{not json",                                                                 # 8
        line("acme", "every 90m", kind="RATE", spec={"bogus": 1}),                   # 9 unknown field
        line(capped, "0 1 * * *"),                                                   # 10-12: quota 2
        line(capped, "0 2 * * *"),
        line(capped, "0 3 * * *"),
        line("globex", "every 15m", kind="RATE", idempotency_key="globex-quarter"),  # 13
    ]
    path = tmp_path / "schedules.jsonl"
    path.write_text("\n".join(lines) + "\n")

    code, summary = run_import(env, str(path))
    assert code == 1, summary  # rejected lines are the command's finding (docs/cli.md); 7 before issue 33
    assert summary["lines"] == 12 and summary["created"] == 5 and summary["already_existed"] == 0
    assert summary["rejected"] == {"INVALID_SPEC": 2, "UNKNOWN_ZONE": 1, "UNKNOWN_TENANT": 1, "DUPLICATE": 1,
                                   "MALFORMED_RECORD": 1, "QUOTA": 1}
    by_line = {r["line"]: r for r in summary["rejections"]}
    assert {n: by_line[n]["reason"] for n in (3, 5, 6, 7, 8, 9)} == {
        3: "INVALID_SPEC", 5: "UNKNOWN_ZONE", 6: "UNKNOWN_TENANT", 7: "DUPLICATE", 8: "MALFORMED_RECORD",
        9: "INVALID_SPEC"}
    quota_line = next(n for n, r in by_line.items() if r["reason"] == "QUOTA")
    assert quota_line in (10, 11, 12) and "hour: 99" in by_line[3]["message"] and "line 2" in by_line[7]["message"]
    assert "spec.bogus" in by_line[9]["message"]

    client = env.plane.client
    acme_ids = {s["schedule_id"] for s in client.list("acme")}
    assert "imp-nightly" in acme_ids and client.get("acme", "imp-nightly")["spec"]["payload"] == b"{}"
    assert len(client.list(capped, state="ACTIVE")) == 2
    before = {t: len(client.list(t)) for t in ("acme", "globex", capped)}

    code, again = run_import(env, str(path))  # the same file again: nothing new, the same rejections
    assert code == 1, again
    assert again["created"] == 0 and again["already_existed"] == 5
    assert again["rejected"] == summary["rejected"]
    assert {t: len(client.list(t)) for t in ("acme", "globex", capped)} == before


def test_a_clean_import_from_stdin_exits_0_and_a_missing_file_2(env):
    stdin = "\n".join(line("globex", f"{n} 4 * * *", schedule_id=f"stdin-{n}") for n in range(20)) + "\n"
    code, summary = run_import(env, "-", stdin)
    assert code == 0 and summary["created"] == 20 and summary["rejections"] == []
    assert {f"stdin-{n}" for n in range(20)} <= {s["schedule_id"] for s in env.plane.client.list("globex")}
    code, error = run_import(env, "/nonexistent/schedules.jsonl")
    assert code == 2 and error["code"] == "USAGE"


def test_create_many_answers_each_request_in_order_without_raising(env):
    tag = uuid.uuid4().hex[:6]
    requests = [CreateRequest("acme", hourly(), schedule_id=f"many-{tag}-{n}") for n in range(300)]
    requests.insert(100, CreateRequest("acme", make_spec("cron", "not a cron"), schedule_id=f"bad-{tag}"))
    requests.insert(200, CreateRequest("bad tenant!", hourly()))
    results = env.plane.client.create_many(requests, window=50)
    assert len(results) == 302
    assert [r["schedule_id"] for r in results[:100]] == [f"many-{tag}-{n}" for n in range(100)]
    assert results[100]["status"] == "REJECTED" and results[100]["reason"] == "INVALID_SPEC"
    assert results[200]["status"] == "REJECTED" and results[200]["reason"] == "MALFORMED_RECORD"
    assert sum(r["status"] == "ACCEPTED" for r in results) == 300
    listed = {s["schedule_id"] for s in env.plane.client.list("acme")}
    assert {f"many-{tag}-{n}" for n in range(300)} <= listed and f"bad-{tag}" not in listed


def test_lines_without_any_result_time_out_and_exit_6(env):
    prefix = f"noengine{uuid.uuid4().hex[:6]}"  # the topics, but no scheduler reading them
    ensure_layout(env.bootstrap, prefix)
    try:
        stdin = "\n".join(line("acme", "0 5 * * *", schedule_id=f"lost-{n}") for n in range(3)) + "\n"
        code, summary = run_import(env, "-", stdin, "--timeout", "3", prefix=prefix)
        assert code == 6 and summary["rejected"] == {"TIMEOUT": 3} and summary["created"] == 0
    finally:
        delete_topics(env.bootstrap, prefix)


def test_a_create_batch_from_any_producer_takes_each_create_as_alone_and_rejects_what_could_not_be(env):
    """Written by hand as another producer would: every command gets its own result, and a command a
    batch may not hold (not a CREATE, another partition's schedule) is refused by itself."""
    client = env.plane.client
    tag = uuid.uuid4().hex[:6]
    partitions = client.command_partitions()
    here = [f"batch-{tag}-{n}" for n in range(200)]
    home = partition_for(here[0].encode(), partitions)
    mine = [sid for sid in here if partition_for(sid.encode(), partitions) == home][:3]
    elsewhere = next(sid for sid in here if partition_for(sid.encode(), partitions) != home)
    commands = [command_record("CREATE", mine[0], "acme", spec=hourly(), idempotency_key=f"k-{tag}"),
                command_record("CREATE", mine[0], "acme", spec=hourly(), idempotency_key=f"k-{tag}"),
                {**command_record("CREATE", mine[1], "acme", spec=hourly()), "spec": make_spec("cron", "61 * * * *")},
                command_record("PAUSE", mine[2], "acme"),
                command_record("CREATE", elsewhere, "acme", spec=hourly())]
    ids = [command["command_id"] for command in commands]
    client.expect(ids)
    client.produce_command(client.codec.encode("CreateBatch", {"batch_id": tag, "commands": commands}),
                           tag.encode(), home)
    results = client.wait(ids)
    first, repeat, invalid, pause, misplaced = (results[cid] for cid in ids)
    assert (first["status"], first["version"]) == ("ACCEPTED", 1)
    assert (repeat["status"], repeat["version"], repeat["schedule_id"]) == ("ACCEPTED", 1, mine[0])
    assert (invalid["status"], invalid["reason"]) == ("REJECTED", "INVALID_SPEC")
    assert (pause["status"], pause["reason"]) == ("REJECTED", "MALFORMED_RECORD")
    assert "only CREATE" in pause["message"]
    assert (misplaced["status"], misplaced["reason"]) == ("REJECTED", "MALFORMED_RECORD")
    assert f"partition {partition_for(elsewhere.encode(), partitions)}" in misplaced["message"]
    listed = {s["schedule_id"] for s in client.list("acme")}
    assert mine[0] in listed and not {mine[1], mine[2], elsewhere} & listed


def test_creates_too_large_for_one_record_are_split_and_all_go_in(env):
    """Five 200 KiB payloads on one partition: more than a record may hold, so the batch splits."""
    client = env.plane.client
    tag = uuid.uuid4().hex[:6]
    partitions = client.command_partitions()
    ids = [sid for sid in (f"big-{tag}-{n}" for n in range(100)) if partition_for(sid.encode(), partitions) == 0][:5]
    payload = b"x" * (200 * 1024)
    results = client.create_many([CreateRequest("acme", {**hourly(), "payload": payload}, schedule_id=sid)
                                  for sid in ids])
    assert [(r["status"], r["schedule_id"]) for r in results] == [("ACCEPTED", sid) for sid in ids]
    assert client.get("acme", ids[-1])["spec"]["payload"] == payload
