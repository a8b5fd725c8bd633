"""ActiveTasks (scheduler/engine/active_tasks.py): readers see a mapping they cannot change; a partition gets
one task, a revoke closes its store without the collection, stopping closes every store."""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from scheduler.engine.active_tasks import ActiveTasks
from scheduler.engine.task import SchedulerTask


@dataclass
class RecordingStore:
    closes: list[dict[str, Any]] = field(default_factory=list)

    def close(self, **kwargs: Any) -> None:
        self.closes.append(kwargs)


@dataclass
class FakeTask:
    store: RecordingStore = field(default_factory=RecordingStore)


def task() -> SchedulerTask:
    return cast(SchedulerTask, FakeTask())


def test_a_started_task_is_read_as_a_mapping_that_offers_no_way_to_change_it() -> None:
    tasks = ActiveTasks()
    first, second = task(), task()
    tasks.start(3, first)
    tasks.start(1, second)
    assert dict(tasks) == {3: first, 1: second} and len(tasks) == 2 and 3 in tasks and tasks.get(2) is None
    assert min(tasks) == 1 and list(tasks.values()) == [first, second]
    assert not isinstance(tasks, MutableMapping) and not hasattr(tasks, "pop")


def test_a_partition_has_at_most_one_task() -> None:
    tasks = ActiveTasks()
    tasks.start(0, task())
    with pytest.raises(ValueError, match="partition 0 already has a task"):
        tasks.start(0, task())


def test_a_revoke_ends_the_task_and_closes_its_store_leaving_the_collection_to_the_caller() -> None:
    tasks = ActiveTasks()
    revoked = task()
    tasks.start(0, revoked)
    tasks.start(1, task())
    assert tasks.revoke(0) and not tasks.revoke(0) and not tasks.revoke(7)
    assert list(tasks) == [1] and cast(FakeTask, revoked).store.closes == [{"collect": False}]


def test_stopping_closes_every_store_and_leaves_none() -> None:
    tasks = ActiveTasks()
    started = [task(), task()]
    for partition, one in enumerate(started):
        tasks.start(partition, one)
    tasks.close_all()
    assert len(tasks) == 0 and all(cast(FakeTask, one).store.closes == [{}] for one in started)
