"""Who gets the next dispatch slot: weighted interleaving of tenants and per-tenant rate limits.

Pure: time comes in as milliseconds. Work a limit holds back stays in the
timeline (delayed and counted, never dropped) and is offered again next turn.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass
class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up."""

    rate: float
    burst: float
    tokens: float = field(default=-1.0)
    updated_ms: int = 0

    def take(self, wanted: int, now_ms: int) -> int:
        if self.tokens < 0:
            self.tokens, self.updated_ms = self.burst, now_ms
        elapsed = max(0, now_ms - self.updated_ms)
        self.tokens = min(self.burst, self.tokens + elapsed * self.rate / 1000.0)
        self.updated_ms = now_ms
        granted = min(wanted, int(self.tokens))
        self.tokens -= granted
        return granted


class RateLimits:
    """One bucket per tenant at the tenant's current rate; a changed rate takes effect at once."""

    def __init__(self, rate_of: Callable[[str], float], burst_seconds: float = 1.0) -> None:
        self.rate_of = rate_of
        self.burst_seconds = burst_seconds
        self._buckets: dict[str, TokenBucket] = {}

    def bucket(self, tenant: str) -> TokenBucket:
        rate = self.rate_of(tenant)
        found = self._buckets.get(tenant)
        if found is None or found.rate != rate:
            found = self._buckets[tenant] = TokenBucket(rate, max(1.0, rate * self.burst_seconds))
        return found


@dataclass
class Selection(Generic[T]):
    chosen: list[T]
    held_back: dict[str, int]  # tenant -> items due but held by its rate limit


def interleave(items: Iterable[tuple[str, T]], budget: int, limits: RateLimits, now_ms: int,
               weights: Mapping[str, int] | None = None) -> Selection[T]:
    """Round-robin over tenants (a tenant of weight w gets w slots a round) within `budget`."""
    queues: dict[str, deque[T]] = {}
    for tenant, item in items:
        queues.setdefault(tenant, deque()).append(item)
    allowance = {tenant: limits.bucket(tenant).take(len(q), now_ms) for tenant, q in queues.items()}
    held = {tenant: len(q) - allowance[tenant] for tenant, q in queues.items() if len(q) > allowance[tenant]}
    chosen: list[T] = []
    active = [tenant for tenant in queues if allowance[tenant] > 0]
    while active and len(chosen) < budget:
        still = []
        for tenant in active:
            share = (weights or {}).get(tenant, 1)
            q = queues[tenant]
            while share > 0 and allowance[tenant] > 0 and len(chosen) < budget:
                chosen.append(q.popleft())
                allowance[tenant] -= 1
                share -= 1
            if allowance[tenant] > 0:
                still.append(tenant)
        active = still
    unused = {tenant: n for tenant, n in allowance.items() if n > 0}
    for tenant, n in unused.items():  # budget ran out: give back what the bucket granted but was not sent
        limits.bucket(tenant).tokens += n
    return Selection(chosen, held)
