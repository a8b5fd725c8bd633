"""Where a partition's due scans start, and which entries a committed stage already made visible.

Dispatched entries and taken wake-ups become RocksDB tombstones; a scan that started at the lane's beginning
would walk over all of them every turn (at the daily average that was 2 ms a scan, four scans a turn, before
compaction caught up). So each lane keeps a floor that no live entry sorts before, moved after each commit
past what was sent, and lowered by any earlier entry written; the planning scans of the wake-up and end-check
lanes start there too. A stage's sent entries are deleted a chunk a
turn later (`delete_staged`); until then scans skip them (ADR 0002).
"""
from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping

from scheduler.engine import stage_records, timeline_keys
from scheduler.engine.stage_policy import StagedPartition
from scheduler.engine.task_context import TaskContext
from scheduler.engine.timeline_keys import CATCH_UP, DISPATCH, END, WAKE


class DueScan:
    def __init__(self, ctx: TaskContext) -> None:
        self.ctx = ctx
        self._floor = {DISPATCH: DISPATCH, CATCH_UP: CATCH_UP, WAKE: WAKE, END: END}
        self._scanned: dict[bytes, list[bytes]] = {}  # keys each lane's scan passed this turn
        self._staged: StagedPartition | None = None  # this partition's part of the open stage, if any
        self._staged_puts: dict[bytes, bytes] = {}  # strict entries written into the staged instant since it began
        self._sent_staged: set[bytes] = set()  # timeline keys a stage's commit sent, not yet deleted here

    def floor(self, lane: bytes) -> bytes:
        """No live entry of `lane` sorts before this key."""
        return self._floor[lane]

    def due(self, lane: bytes, now_ms: int) -> Iterator[tuple[bytes, bytes]]:
        """(key, packed entry) of `lane` due by `now_ms`, in due order, skipping those dropped in this
        transaction; the keys passed are remembered so that the commit can move the floor past them."""
        bound = timeline_keys.lane_bound(lane, now_ms)
        scanned = self._scanned.setdefault(lane, [])
        sent, txn = self._sent_staged, self.ctx.txn
        for key, value in self.ctx.store.items_from("timeline", self._floor[lane], bound):
            if key in sent:
                continue  # already visible through a stage, deleted here in a later turn
            scanned.append(key)
            if txn.is_deleted("timeline", key):
                continue
            yield key, value

    def next_due_ms(self, lane: bytes) -> int | None:
        for key in self.ctx.store.keys_from("timeline", self._floor[lane], timeline_keys.lane_end(lane)):
            if key not in self._sent_staged:
                return timeline_keys.due_ms_of(key)
        return None

    def count_due(self, lane: bytes, now_ms: int, cap: int) -> int:
        """Entries of `lane` due by `now_ms` in the store, counted up to `cap` (a stage's sent ones are not)."""
        count = 0
        for key in self.ctx.store.keys_from("timeline", self._floor[lane], timeline_keys.lane_bound(lane, now_ms)):
            if key not in self._sent_staged:
                count += 1
                if count >= cap:
                    break
        return count

    def committed(self, changes: Mapping[bytes, bytes | None]) -> None:
        """Before the store is written: move each lane's floor past what this turn dispatched, lower it to any
        earlier entry written, and note what was written into the staged instant."""
        for lane, scanned in self._scanned.items():
            if scanned:
                live = next((key for key in scanned if changes.get(key, b"") is not None), None)
                self._floor[lane] = live if live is not None else scanned[-1] + b"\x00"
        staged = self._staged
        for key, value in changes.items():
            lane = timeline_keys.lane_of(key)
            if value is not None and lane in self._floor and key < self._floor[lane]:
                self._floor[lane] = key
            if lane == DISPATCH:
                if value is not None and staged is not None and staged.start <= key < staged.end:
                    self._staged_puts[key] = value
                self._sent_staged.discard(key)  # deleted, or written anew: live, whatever a stage sent under it
        self._scanned = {}

    def after_write(self) -> None:
        """After the store is written: move each floor up to the lane's first live entry (one seek), past the
        tombstones below it and the entries a stage sent that lie at its start."""
        for lane, floor in self._floor.items():
            for key in self.ctx.store.keys_from("timeline", floor, timeline_keys.lane_end(lane)):
                if key not in self._sent_staged:
                    self._floor[lane] = key
                    break

    def reset(self) -> None:
        self._scanned = {}

    # -- staged bursts (scheduler/engine/stage_policy.py, ADR 0002) ---------------------------

    def stage(self, part: StagedPartition, share: int, left: dict[bytes, int], refill: Callable[[bytes], int],
              groups: dict[bytes, tuple[list[bytes], list[bytes]]]) -> None:
        """Prepare up to `share` more entries of a staged instant into `groups` (stage_records.prepare); read
        from the committed store: a turn's change to one of them drops the stage (contradicts_stage)."""
        if self._staged is None:
            self._staged, self._staged_puts = part, {}
        stage_records.prepare(self.ctx.store.items_from("timeline", part.cursor, part.end), part, share, left,
                              refill, groups)

    def staged_sent(self, part: StagedPartition) -> None:
        """The stage's commit made these entries visible. They are deleted here later, a chunk a turn
        (`delete_staged`: at the instant the CPU is better spent on the readers and the broker); until then
        scans skip them and start past them where nothing live lies in between."""
        written = self._staged_puts if self._staged is part else {}
        # Every sent entry is unchanged since staged: a change to one drops the stage (contradicts_stage).
        self._sent_staged.update(part.sent)
        low = min([part.resume_floor(), *written])
        if self._floor[DISPATCH] >= part.start:
            self._floor[DISPATCH] = max(self._floor[DISPATCH], low)
        self._staged, self._staged_puts = None, {}

    def delete_staged(self, budget: int) -> None:
        """Delete, in this turn's transaction, up to `budget` entries a stage sent (their changelog tombstones
        included: a stage carries none). An entry written anew since (an update's new version at the same
        key) is no longer among them: `committed` took it out, as it takes out those deleted here."""
        txn = self.ctx.txn
        for key in itertools.islice(self._sent_staged, budget):
            if not txn.is_deleted("timeline", key):
                txn.delete("timeline", key)

    def has_staged_to_delete(self) -> bool:
        return bool(self._sent_staged)

    def contradicts_stage(self) -> bool:
        """Whether this turn changed an entry the open stage has already prepared (a cancel, an update, a
        pause): committing the change while the stage still holds the old occurrence would let the stage
        send it after the change's ACCEPTED result."""
        staged = self._staged
        if staged is None or not staged.sent:
            return False
        return any(staged.holds(key) for key in self.ctx.txn.changes["timeline"])

    def stage_dropped(self) -> None:
        self._staged, self._staged_puts = None, {}
