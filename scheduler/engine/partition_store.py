"""RocksDB per input partition, written only after the Kafka transaction commits.

Each logical store is a column family; a ``meta`` family keeps, per store, the
next changelog offset to read. Data and offsets go in one ``WriteBatch``, so a
crash leaves the local state at some committed transaction, never in between,
and restore resumes from the checkpoint (quixstreams does the same).

The occurrence-status store is the one that grows with every occurrence, so it lives
in a second database opened with RocksDB's TTL: compactions drop what was last
written longer ago than its changelog keeps records (7 days), and the disk a node
needs stays bounded by its rate. The two databases are written one after the
other; a crash between them leaves each at a committed transaction with its own
offsets, and restore reads every changelog to its end before a partition runs.
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
    AccessType,
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
_STATUS = "occurrences"
_MAIN_STORES = tuple(name for name in STORES if name != _STATUS)
_META = "meta"
# The `retention.ms` of the occurrence-status changelog (topologies/scheduler.toml): a status older than that is
# gone from the changelog, so a node restored later would not have it either. A restore stamps what it writes
# with the time of the restore, so a restored status lives up to this long again.
STATUS_TTL_SECONDS = 7 * 24 * 3600
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


def _open(path: Path, names: tuple[str, ...], ttl_seconds: int | None = None) -> Rdict:
    """A database with the given column families (and ``meta``); a corrupt or foreign directory is removed,
    for the changelogs rebuild it. A family an older layout left there is dropped: its changelog restores
    it where it lives now."""
    access = AccessType.with_ttl(ttl_seconds) if ttl_seconds else AccessType.read_write()
    families = {name: _family_options() for name in (*names, _META)}
    try:
        existing = set(Rdict.list_cf(str(path))) if (path / "CURRENT").exists() else set()
        leftovers = existing - set(families) - {"default"}
        db = Rdict(str(path), options=_options(),
                   column_families={**families, **{n: _family_options() for n in leftovers}}, access_type=access)
    except Exception as exc:
        if "lock" in str(exc).lower():  # open elsewhere (not yet collected here): not corrupt, never removed
            raise
        log.warning("local store %s unusable (%s); rebuilding from the changelog", path, exc)
        shutil.rmtree(path, ignore_errors=True)
        return Rdict(str(path), options=_options(), column_families=families, access_type=access)
    for name in leftovers:
        log.info("local store %s: dropping column family %s of an older layout", path, name)
        db.drop_column_family(name)
    return db


class PartitionStore:
    def __init__(self, path: Path, status_ttl_seconds: int = STATUS_TTL_SECONDS) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = _open(path, _MAIN_STORES)
        self._status_db = _open(path.with_name(f"{path.name}-status"), (_STATUS,), status_ttl_seconds)
        self._db_of = {**{name: self._db for name in _MAIN_STORES}, _STATUS: self._status_db}
        self._families = {name: self._db_of[name].get_column_family(name) for name in STORES}
        self._handles = {name: self._db_of[name].get_column_family_handle(name) for name in STORES}
        self._metas = {db: (db.get_column_family(_META), db.get_column_family_handle(_META))
                       for db in (self._db, self._status_db)}

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
        raw = self._metas[self._db_of[store]][0].get(store.encode())
        return _OFFSET.unpack(raw)[0] if raw else 0

    def write(self, changes: Mapping[str, Mapping[bytes, bytes | None]], offsets: Mapping[str, int]) -> None:
        """Apply committed changes and the changelog offsets that cover them, atomically per database."""
        batches = {db: WriteBatch(raw_mode=True) for db in self._metas}
        for store, writes in changes.items():
            if not writes:
                continue
            batch, handle = batches[self._db_of[store]], self._handles[store]
            for key, value in writes.items():
                if value is None:
                    batch.delete(key, handle)
                else:
                    batch.put(key, value, handle)
        for store, offset in offsets.items():
            db = self._db_of[store]
            batches[db].put(store.encode(), _OFFSET.pack(offset), self._metas[db][1])
        for db, batch in batches.items():
            if len(batch):
                db.write(batch)

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

    def compact(self) -> None:
        """Compact every store now; what the status store's TTL expired is dropped by compactions."""
        for family in self._families.values():
            family.compact_range(None, None)

    def close(self, collect: bool = True) -> None:
        """`collect`: a collection frees what still holds the database, so its directory can be opened again
        at once; whoever closes several stores collects once, after the last (one costs ~0.1 s in an engine)."""
        for family in self._families.values():
            family.close()
        for family, _ in self._metas.values():
            family.close()
        self._db.close()
        self._status_db.close()
        self._families.clear()
        self._handles.clear()
        self._metas.clear()
        self._db_of.clear()
        if collect:
            gc.collect()


def _unlogged() -> WriteOptions:
    options = WriteOptions()
    # rocksdict's stub declares disable_wal a setter method; the class has a settable attribute.
    options.disable_wal = True  # type: ignore[method-assign, assignment]
    return options


_UNLOGGED = _unlogged()


class BulkWrite:
    """Puts and deletes straight into WriteBatches, written without the WAL and without a checkpoint: a restore
    replays a changelog, so what a crash loses of it is read again from the last `PartitionStore.checkpoint`
    (the WAL was a second copy of every record restored). The status store's records go to its own database's
    batch, told apart by their column family handle."""

    def __init__(self, store: PartitionStore) -> None:
        self._store = store
        self._batch = WriteBatch(raw_mode=True)
        self._status_batch = WriteBatch(raw_mode=True)
        self._status_handle = store._handles[_STATUS]

    def put(self, key: bytes, value: bytes, handle: Any) -> None:
        (self._status_batch if handle is self._status_handle else self._batch).put(key, value, handle)

    def delete(self, key: bytes, handle: Any) -> None:
        (self._status_batch if handle is self._status_handle else self._batch).delete(key, handle)

    def handle(self, store: str) -> Any:
        return self._store._handles[store]

    def commit(self) -> None:
        if len(self._status_batch):
            self._store._status_db.write(self._status_batch, _UNLOGGED)
        if len(self._batch):
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
