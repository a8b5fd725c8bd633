"""The process's active tasks, one per restored schedule partition, and the only way they come and go.

Four parts of the process read the tasks (the turn, the stager, the due-work pacing, the metrics) and one
changes them: the assignment starts a partition's task once its restore is done and revokes it when the group
takes the partition away; the process closes what is left when it stops. A plain dict shared by all of them let
any reader add or pop an entry, so who owned a task was a convention. Here the readers get a read-only mapping
(`Mapping[int, SchedulerTask]`) and the changes are three named calls, as Kafka Streams' TaskManager owns its
task registry.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping

from scheduler.engine.task import SchedulerTask


class ActiveTasks(Mapping[int, SchedulerTask]):
    """Schedule partition -> its task, for the partitions this process owns and has restored."""

    def __init__(self) -> None:
        self._tasks: dict[int, SchedulerTask] = {}

    def __getitem__(self, partition: int) -> SchedulerTask:
        return self._tasks[partition]

    def __iter__(self) -> Iterator[int]:
        return iter(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, partition: int, task: SchedulerTask) -> None:
        """A restored partition's task begins dispatching; a partition has at most one task."""
        if partition in self._tasks:
            raise ValueError(f"partition {partition} already has a task")
        self._tasks[partition] = task

    def revoke(self, partition: int) -> bool:
        """The group took the partition away: its task ends and its store is closed without the collection
        that frees its files at once (the caller collects once for all the partitions revoked together).
        Whether the partition had a task."""
        task = self._tasks.pop(partition, None)
        if task is None:
            return False
        task.store.close(collect=False)
        return True

    def close_all(self) -> None:
        """The process is stopping: every task's store closed."""
        tasks, self._tasks = self._tasks, {}
        for task in tasks.values():
            task.store.close()
