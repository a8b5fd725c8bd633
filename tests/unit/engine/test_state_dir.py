"""One process per instance state dir (scheduler/engine/state_dir.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scheduler.engine.config import EngineConfig
from scheduler.engine.state_dir import LOCK_NAME, StateDirInUse, StateDirLock, instance_dir


def test_the_instance_id_is_part_of_the_path() -> None:
    config = EngineConfig(bootstrap_servers="127.0.0.1:1", prefix="sched", state_dir=Path("/var/state"),
                          instance_id="host-1")
    assert config.instance_dir == Path("/var/state/sched/host-1")


@pytest.mark.parametrize("bad", ["", "..", ".", "a/b", "../x", "-x", "a b"])
def test_an_instance_id_that_would_leave_its_directory_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="instance id"):
        instance_dir(Path("/var/state"), "sched", bad)


def test_a_second_locker_is_refused_until_the_first_closes(tmp_path: Path) -> None:
    directory = tmp_path / "sched" / "a"
    first = StateDirLock(directory)
    with pytest.raises(StateDirInUse) as refused:
        StateDirLock(directory)
    assert str(directory) in str(refused.value) and f"pid {os.getpid()}" in str(refused.value)
    assert "--instance-id" in str(refused.value)
    first.close()
    with StateDirLock(directory):
        assert (directory / LOCK_NAME).read_text().strip() == str(os.getpid())


def test_other_instances_lock_their_own_directories(tmp_path: Path) -> None:
    with StateDirLock(instance_dir(tmp_path, "sched", "a")), StateDirLock(instance_dir(tmp_path, "sched", "b")):
        pass


def test_the_lock_of_a_killed_process_is_gone(tmp_path: Path) -> None:
    """flock belongs to the open file, which the kernel closes when the process dies, even by SIGKILL."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from scheduler.engine.state_dir import StateDirLock\n"
         "lock = StateDirLock(Path(sys.argv[1])); print('held', flush=True); time.sleep(60)", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(StateDirInUse, match=f"pid {holder.pid}"):
            StateDirLock(tmp_path)
    finally:
        holder.kill()
        holder.wait(10)
    with StateDirLock(tmp_path):
        pass
