"""The max_concurrency quota: a tenant's running slots, shared by the partitions its schedules live in.

An occurrence holds a running slot from its dispatch until its attempt ends
(SUCCEEDED, DEAD, CANCELED, waiting for a retry) or it has been silent for
longer than its run timeout. The scheduler can only hold work back at
dispatch, so that is where the quota bites: the excess waits in the timeline,
delayed, never dropped.

A tenant's schedules live in every partition, so its slots are counted by its
admission task (the partition of `<prefix>.admissions` its name hashes to, as
for max_active_schedules). A schedule partition asks it for the slots it could
use now (WANT_RUNNING), dispatches within the slots it holds, and gives back
(RETURN_RUNNING) what it holds beyond its running occurrences once nothing of
the tenant is due there. The admission task never has more than the quota
handed out, shares what is free evenly among the partitions that wait, and
after the quota was lowered takes slots back from partitions that ask for more.
Both sides change their state in the Kafka transaction that consumes the
request or grant, so the counts stay exact through crashes and failover.
"""
from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scheduler.engine.partition_store import StoreTransaction

STORE = "admissions"
REPEAT_WISH_MS = 1_000  # an unanswered wish is sent again after this long (the answer may be on its way)
REVIEW_MS = 5_000  # every tenant holding slots here is looked at this often, touched this turn or not

_COUNT = struct.Struct(">q")
_PARTITION = struct.Struct(">I")
# The admissions store's key space, one encoding (_COUNT values) for every count in it. A bare tenant name
# holds the tenant's active schedules (admission side, `active_count`); the prefixed keys below hold the
# running slots, and scheduler.engine.leases keeps its lease index under b"\x08". Tenant names
# (topic-name characters) never start with a prefix byte.
_LEDGER_HELD = b"\x01"    # admission side: tenant \0 partition -> slots that partition holds
_LEDGER_WANT = b"\x02"    # admission side: tenant \0 partition -> more slots it waits for
_HELD = b"\x03"           # schedule side: tenant -> slots this partition holds
_RUNNING = b"\x04"        # schedule side: tenant \0 occurrence_id -> expiry (ms)
_RUNNING_COUNT = b"\x05"  # schedule side: tenant -> occurrences running here
_EXPIRY = b"\x06"         # schedule side: expiry (ms) tenant \0 occurrence_id -> b""


def share_out(quota: int, held: Mapping[int, int], wanted: Mapping[int, int], asking: int | None) -> dict[int, int]:
    """Slots to give (positive) or take back (negative) per partition.

    Over the quota (it was lowered), the asking partition gives back what it
    can of the excess. Otherwise the free slots are water-filled: smaller
    wishes are met in full, the rest is split evenly, so no partition starves.
    """
    excess = sum(held.values()) - quota
    if excess > 0:
        take = min(excess, held.get(asking, 0)) if asking is not None else 0
        return {asking: -take} if take > 0 and asking is not None else {}
    free = -excess
    waiting = sorted((want, partition) for partition, want in wanted.items() if want > 0)
    given: dict[int, int] = {}
    for left, (want, partition) in zip(range(len(waiting), 0, -1), waiting, strict=True):
        give = min(want, -(-free // left))
        if give > 0:
            given[partition] = give
            free -= give
    return given


def _count(txn: StoreTransaction, key: bytes) -> int:
    raw = txn.get(STORE, key)
    return _COUNT.unpack(raw)[0] if raw else 0


def _set_count(txn: StoreTransaction, key: bytes, value: int) -> None:
    if value:
        txn.put(STORE, key, _COUNT.pack(value))
    else:
        txn.delete(STORE, key)


def active_count(txn: StoreTransaction, tenant: str) -> int:
    """Active schedules of a tenant this partition counts for (admission side)."""
    return _count(txn, tenant.encode())


def set_active_count(txn: StoreTransaction, tenant: str, count: int) -> None:
    _set_count(txn, tenant.encode(), count)


def _per_partition(prefix: bytes, tenant: str, partition: int) -> bytes:
    return prefix + tenant.encode() + b"\x00" + _PARTITION.pack(partition)


def ledger_change(txn: StoreTransaction, tenant: str, kind: str, partition: int, count: int, quota: int,
                  partitions: int) -> dict[int, int]:
    """Admission side: record a partition's wish or returned slots; returns the slot changes to send out."""
    if kind == "WANT_RUNNING":
        _set_count(txn, _per_partition(_LEDGER_WANT, tenant, partition), max(0, count))
    else:
        key = _per_partition(_LEDGER_HELD, tenant, partition)
        _set_count(txn, key, max(0, _count(txn, key) - count))
    held = {p: _count(txn, _per_partition(_LEDGER_HELD, tenant, p)) for p in range(partitions)}
    wanted = {p: _count(txn, _per_partition(_LEDGER_WANT, tenant, p)) for p in range(partitions)}
    changes = share_out(quota, held, wanted, partition if kind == "WANT_RUNNING" else None)
    for p, delta in changes.items():
        _set_count(txn, _per_partition(_LEDGER_HELD, tenant, p), held[p] + delta)
        if delta > 0:
            _set_count(txn, _per_partition(_LEDGER_WANT, tenant, p), wanted[p] - delta)
    return changes


@dataclass(frozen=True)
class SlotMessage:
    tenant: str
    kind: str   # WANT_RUNNING | RETURN_RUNNING
    count: int


class RunningSlots:
    """Schedule side: the running slots this partition holds per tenant and the occurrences using them.

    State is read and written through the turn's StoreTransaction; what is kept
    in memory (this turn's demand, the last wish sent) is only advice and may be
    lost with an aborted turn or a restart.
    """

    def __init__(self, quota_of: Callable[[str], int | None]) -> None:
        self.quota_of = quota_of  # tenant -> max_concurrency, None: unlimited (not counted)
        self._wished: dict[str, tuple[int, int]] = {}  # tenant -> (count, at_ms) of the last wish sent
        self._reviewed_ms = 0
        self.new_turn()

    def new_turn(self) -> None:
        self._demand: Counter[str] = Counter()   # limited tenants' due entries offered this turn
        self._blocked: Counter[str] = Counter()  # of those, held back for want of a slot
        self._touched: set[str] = set()
        self._free: dict[str, int | None] = {}   # tenant -> slots still free this turn (None: unlimited)

    @property
    def blocked(self) -> Mapping[str, int]:
        return self._blocked

    def free(self, txn: StoreTransaction, tenant: str) -> int:
        return _count(txn, _HELD + tenant.encode()) - _count(txn, _RUNNING_COUNT + tenant.encode())

    def take(self, txn: StoreTransaction, tenant: str) -> bool:
        """May one more due occurrence of `tenant` be offered for dispatch this turn? If not it stays due.

        A slot taken here and then not sent (the turn's budget or the trigger
        rate ran out first) is only lost for this turn.
        """
        if tenant not in self._free:
            self._free[tenant] = None if self.quota_of(tenant) is None else self.free(txn, tenant)
        left = self._free[tenant]
        if left is None:
            return True
        self._demand[tenant] += 1
        self._touched.add(tenant)
        if left > 0:
            self._free[tenant] = left - 1
            return True
        self._blocked[tenant] += 1
        return False

    def is_limited(self, tenant: str) -> bool:
        """Per dispatched entry: answered from this turn's `take` when it asked, without a quota lookup."""
        if tenant in self._free:
            return self._free[tenant] is not None
        return self.quota_of(tenant) is not None

    def dispatched(self, txn: StoreTransaction, tenant: str, occurrence_id: str, expires_ms: int) -> None:
        previous = self._expiry(txn, tenant, occurrence_id)
        if previous is None:
            count_key = _RUNNING_COUNT + tenant.encode()
            _set_count(txn, count_key, _count(txn, count_key) + 1)
        self._set_expiry(txn, tenant, occurrence_id, previous, expires_ms)
        self._touched.add(tenant)

    def refreshed(self, txn: StoreTransaction, tenant: str, occurrence_id: str, expires_ms: int) -> None:
        """A STARTED or HEARTBEAT attempt event: the occurrence is alive, its silence counts from now."""
        previous = self._expiry(txn, tenant, occurrence_id)
        if previous is not None:
            self._set_expiry(txn, tenant, occurrence_id, previous, expires_ms)

    def finished(self, txn: StoreTransaction, tenant: str, occurrence_id: str) -> None:
        expires_ms = self._expiry(txn, tenant, occurrence_id)
        if expires_ms is None:
            return
        txn.delete(STORE, _running_key(tenant, occurrence_id))
        txn.delete(STORE, _expiry_key(expires_ms, tenant, occurrence_id))
        count_key = _RUNNING_COUNT + tenant.encode()
        _set_count(txn, count_key, max(0, _count(txn, count_key) - 1))
        self._touched.add(tenant)

    def granted(self, txn: StoreTransaction, tenant: str, slots: int) -> None:
        key = _HELD + tenant.encode()
        _set_count(txn, key, max(0, _count(txn, key) + slots))
        self._wished.pop(tenant, None)
        self._touched.add(tenant)

    def expire(self, txn: StoreTransaction, now_ms: int) -> None:
        """Before dispatch: occurrences silent past their run timeout no longer hold a slot."""
        for key in list(txn.store.keys_from(STORE, _EXPIRY, _EXPIRY + _COUNT.pack(now_ms + 1))):
            if not txn.is_deleted(STORE, key):
                tenant, occurrence_id = key[1 + _COUNT.size:].split(b"\x00", 1)
                self.finished(txn, tenant.decode(), occurrence_id.decode())

    def settle(self, txn: StoreTransaction, now_ms: int) -> list[SlotMessage]:
        """After dispatch: give back idle slots, ask for what was held back.

        The tenants this turn touched are looked at, and every few seconds all
        that hold slots here, so a slot is not kept idle after an aborted turn.
        """
        if now_ms - self._reviewed_ms >= REVIEW_MS:
            self._reviewed_ms = now_ms
            self._touched.update(key[1:].decode() for key in txn.store.keys_from(STORE, _HELD, _RUNNING))
        messages = []
        for tenant in sorted(self._touched):
            idle = self.free(txn, tenant)
            if self._demand[tenant] == 0 and idle > 0:
                key = _HELD + tenant.encode()
                _set_count(txn, key, _count(txn, key) - idle)
                messages.append(SlotMessage(tenant, "RETURN_RUNNING", idle))
            wish = self._blocked[tenant]
            last = self._wished.get(tenant)
            if wish and (last is None or last[0] != wish or now_ms - last[1] >= REPEAT_WISH_MS):
                self._wished[tenant] = (wish, now_ms)
                messages.append(SlotMessage(tenant, "WANT_RUNNING", wish))
        return messages

    def _expiry(self, txn: StoreTransaction, tenant: str, occurrence_id: str) -> int | None:
        raw = txn.get(STORE, _running_key(tenant, occurrence_id))
        return _COUNT.unpack(raw)[0] if raw else None

    def _set_expiry(self, txn: StoreTransaction, tenant: str, occurrence_id: str, previous: int | None,
                    expires_ms: int) -> None:
        if previous is not None:
            txn.delete(STORE, _expiry_key(previous, tenant, occurrence_id))
        txn.put(STORE, _running_key(tenant, occurrence_id), _COUNT.pack(expires_ms))
        txn.put(STORE, _expiry_key(expires_ms, tenant, occurrence_id), b"")


def _running_key(tenant: str, occurrence_id: str) -> bytes:
    return _RUNNING + tenant.encode() + b"\x00" + occurrence_id.encode()


def _expiry_key(expires_ms: int, tenant: str, occurrence_id: str) -> bytes:
    return _EXPIRY + _COUNT.pack(expires_ms) + tenant.encode() + b"\x00" + occurrence_id.encode()
