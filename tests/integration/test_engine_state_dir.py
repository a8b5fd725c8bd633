"""A process's stores live under its instance id, and a second `scheduler run` on the same instance state dir is
refused while the first keeps running (scheduler/engine/state_dir.py)."""
from __future__ import annotations

from pathlib import Path

import pytest
from engine_harness import TOPOLOGY, SchedulerProcess, ensure_layout, wait_until_ready

from scheduler.engine.cli import EXIT_STATE_IN_USE

pytestmark = pytest.mark.integration


def same_dir_elsewhere(tmp_path: Path, name: str, state: Path) -> Path:
    """`state` under another path (replicas mounting one volume): the harness keeps each one's log beside it."""
    (tmp_path / name).mkdir()
    link = tmp_path / name / "state"
    link.symlink_to(state, target_is_directory=True)
    return link


def test_a_second_process_on_the_same_instance_state_dir_is_refused_and_the_first_runs_on(
        kafka_bootstrap, unique_prefix, tmp_path):
    ensure_layout(kafka_bootstrap, unique_prefix)
    state = tmp_path / "state"
    first = SchedulerProcess(kafka_bootstrap, unique_prefix, state, "a").start()
    try:
        wait_until_ready(first, 90)
        instance = state / unique_prefix / "a"
        assert (instance / "LOCK").is_file()
        second = SchedulerProcess(kafka_bootstrap, unique_prefix, same_dir_elsewhere(tmp_path, "second", state),
                                  "a").start()
        assert second.proc is not None and second.proc.wait(60) == EXIT_STATE_IN_USE
        refusal = second.log_tail(5)
        assert f"is in use by another scheduler process (pid {first.proc.pid})" in refusal, refusal
        assert "Traceback" not in refusal
        assert first.alive()
        stores = {path.name for path in instance.iterdir() if path.is_dir()}
        partitions = {f"p{p}" for p in range(TOPOLOGY.schedule_partitions)}
        assert stores and stores <= partitions | {f"{name}-status" for name in partitions}, stores
    finally:
        assert first.terminate() == 0, first.log_tail()
    third = SchedulerProcess(kafka_bootstrap, unique_prefix, same_dir_elsewhere(tmp_path, "third", state),
                             "a").start()  # the first's lock went with it
    try:
        wait_until_ready(third, 90)
    finally:
        assert third.terminate() == 0, third.log_tail()
