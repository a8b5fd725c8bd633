"""One RocksDB per input partition, written only after the Kafka transaction commits.

Each logical store is a column family; a ``meta`` family keeps, per store, the
next changelog offset to read. Data and offsets go in one ``WriteBatch``, so a
crash leaves the local state at some committed transaction, never in between,
and restore resumes from the checkpoint (quixstreams does the same).
"""
from __future__ import annotations

import gc
import logging
import shutil
import struct
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from rocksdict import (
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteBufferManager,
    WriteOptions,
)

log = logging.getLogger(__name__)

STORES = ("schedules", "timeline", "occurrences", "admissions")
_META = "meta"
_OFFSET = struct.Struct(">q")
# RocksDB memory of the whole process, every store and standby copy together: one block cache, and the memtables
# charged to it. With RocksDB's defaults each column family of each partition could hold 2 x 64 MiB of memtables
# (8 partitions x 4 stores: up to 4 GiB), which is how the engine's RSS grew from 0.3 to 1.3 GiB in ten minutes
# at the daily average. A flush then comes every ~minute at that rate; reads of planning and dispatch hit the
# newest data, which the memtables and the cache hold.
STORE_MEMORY_BYTES = 256 * 2**20
MEMTABLE_BYTES = 128 * 2**20


def _bounded(end: bytes) -> ReadOptions:
    options = ReadOptions()
    options.set_iterate_upper_bound(end)
    return options


@cache
def _shared_memory() -> tuple[Cache, WriteBufferManager]:
    block_cache = Cache(STORE_MEMORY_BYTES)
    return block_cache, WriteBufferManager.new_write_buffer_manager_with_cache(MEMTABLE_BYTES, False, block_cache)


def _family_options() -> Options:
    opts = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_block_cache(_shared_memory()[0])
    opts.set_block_based_table_factory(table)
    return opts


def _options() -> Options:
    opts = _family_options()
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.set_write_buffer_manager(_shared_memory()[1])
    return opts


class PartitionStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        families = {name: _family_options() for name in (*STORES, _META)}
        try:
            self._db = Rdict(str(path), options=_options(), column_families=families)
        except Exception as exc:  # a corrupt or foreign directory: the changelog rebuilds it
            log.warning("local store %s unusable (%s); rebuilding from the changelog", path, exc)
            shutil.rmtree(path, ignore_errors=True)
            self._db = Rdict(str(path), options=_options(), column_families=families)
        self._families = {name: self._db.get_column_family(name) for name in (*STORES, _META)}
        self._handles = {name: self._db.get_column_family_handle(name) for name in (*STORES, _META)}

    def get(self, store: str, key: bytes) -> bytes | None:
        return self._families[store].get(key)

    def items_from(self, store: str, start: bytes, end: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Entries in [start, end). The bound matters: without it a seek past the last live key walks
        every tombstone after it (after a burst: the whole dispatched range) looking for the next.

        A generator, so `end` and its ReadOptions live as long as the iteration: RocksDB keeps only a
        pointer to the bound, and a caller's temporary bound freed mid-scan cut scans short."""
        options = _bounded(end)
        yield from self._families[store].items(from_key=start, read_opt=options)

    def keys_from(self, store: str, start: bytes, end: bytes) -> Iterator[bytes]:
        options = _bounded(end)
        yield from self._families[store].keys(from_key=start, read_opt=options)

    def changelog_offset(self, store: str) -> int:
        raw = self._families[_META].get(store.encode())
        return _OFFSET.unpack(raw)[0] if raw else 0

    def write(self, changes: Mapping[str, Mapping[bytes, bytes | None]], offsets: Mapping[str, int]) -> None:
        """Apply committed changes and the changelog offsets that cover them, atomically."""
        batch = WriteBatch(raw_mode=True)
        for store, writes in changes.items():
            handle = self._handles[store]
            for key, value in writes.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        for store, offset in offsets.items():
            batch.put(store.encode(), _OFFSET.pack(offset), self._handles[_META])
        self._db.write(batch)

    def bulk(self) -> BulkWrite:
        """A batch a restore fills record by record, without building the changes mapping `write` takes."""
        return BulkWrite(self)

    def checkpoint(self, offsets: Mapping[str, int], unlogged: bool = True) -> None:
        """Claim what unlogged writes (`BulkWrite`) brought: their memtables are flushed first, so a crash
        before the flush finds the previous checkpoint and replays from there, never a claim of lost data.
        `unlogged=False`: none since the last checkpoint, no flush (~60 ms a store) needed."""
        if unlogged:
            for family in self._families.values():
                family.flush(True)
        self.write({}, offsets)

    def close(self, collect: bool = True) -> None:
        """`collect`: a collection frees what still holds the database, so its directory can be opened again
        at once; whoever closes several stores collects once, after the last (one costs ~0.1 s in an engine)."""
        for family in self._families.values():
            family.close()
        self._db.close()
        self._families.clear()
        self._handles.clear()
        if collect:
            gc.collect()


def _unlogged() -> WriteOptions:
    options = WriteOptions()
    # rocksdict's stub declares disable_wal a setter method; the class has a settable attribute.
    options.disable_wal = True  # type: ignore[method-assign, assignment]
    return options


_UNLOGGED = _unlogged()


class BulkWrite:
    """Puts and deletes straight into one WriteBatch, written without the WAL and without a checkpoint: a restore
    replays a changelog, so what a crash loses of it is read again from the last `PartitionStore.checkpoint`
    (the WAL was a second copy of every record restored)."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self._batch = WriteBatch(raw_mode=True)
        self.put = self._batch.put
        self.delete = self._batch.delete

    def handle(self, store: str) -> Any:
        return self._store._handles[store]

    def commit(self) -> None:
        self._store._db.write(self._batch, _UNLOGGED)


class StoreTransaction:
    """Reads through to the store; writes wait here until the Kafka transaction commits."""

    def __init__(self, store: PartitionStore) -> None:
        self.store = store
        self.changes: dict[str, dict[bytes, bytes | None]] = {name: {} for name in STORES}

    def get(self, store: str, key: bytes) -> bytes | None:
        pending = self.changes[store]
        if key in pending:
            return pending[key]
        return self.store.get(store, key)

    def put(self, store: str, key: bytes, value: bytes) -> None:
        self.changes[store][key] = value

    def delete(self, store: str, key: bytes) -> None:
        self.changes[store][key] = None

    def is_deleted(self, store: str, key: bytes) -> bool:
        pending = self.changes[store]
        return key in pending and pending[key] is None

    def __bool__(self) -> bool:
        return any(self.changes.values())
