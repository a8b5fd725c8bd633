"""One transactional producer, the way every transactional writer of the project uses it: the engine's
turns and staged bursts, and a worker's attempt records. A commit is retried with backoff until a
deadline, a failed delivery is latched and fails the commit, and a failed abort replaces the producer
(a new one with the same transactional id fences the old epoch and aborts what it left open), except
when the producer was fenced: then a newer owner holds the id, and replacing it would fence that owner.

`send_offsets` is bounded by the caller's timeout: librdkafka's `send_offsets_to_transaction` can ignore
its timeout while the group's coordinator is down or moving (confluentinc/librdkafka#5456, #5511), and a
process stuck in it dispatches nothing. Past the bound the stuck producer is left to its thread and a new
one with the same transactional id takes its place; its init fences the stuck epoch, whose open
transaction the broker aborts, and the turn fails as an abortable error: its inputs are read again.
"""
from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from scheduler.kafka.clients import DURABLE_PRODUCER, UNWRITTEN_TOPIC, settled

log = logging.getLogger(__name__)

COMMIT_BACKOFF_S = 0.1   # first pause between commit attempts; doubled each time
MAX_BACKOFF_S = 2.0
SEND_OFFSETS_GRACE_S = 2.0  # past the call's own timeout before it counts as stuck
REPLACE_ATTEMPTS = 3        # inits tried for a stuck producer's successor before the failure is raised
FENCED = frozenset({KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH})


def is_fenced(error: KafkaError) -> bool:
    return error.code() in FENCED


class TransactionalProducer:
    """A transactional id and the producer currently holding it."""

    def __init__(self, conf: Mapping[str, Any], init_timeout_s: float = 30.0, settle: bool = False) -> None:
        self.conf = {**conf, **DURABLE_PRODUCER}
        self.transactional_id: str = self.conf["transactional.id"]
        self.init_timeout_s = init_timeout_s
        self.settle = settle  # connect before the init: for producers made on a takeover's path
        self.failures: list[KafkaError] = []
        self.raw = self._initialised()
        self.in_transaction = False
        # Producers stuck in a call are kept referenced while it runs: freeing one then would crash.
        self.stuck: list[tuple[Producer, threading.Thread]] = []

    def _initialised(self) -> Producer:
        producer = Producer(self.conf)
        if self.settle:
            settled(producer, self.init_timeout_s, UNWRITTEN_TOPIC)
        producer.init_transactions(self.init_timeout_s)
        return producer

    def begin(self) -> None:
        self.failures = []
        self.raw.begin_transaction()
        self.in_transaction = True

    def produce(self, topic: str, value: bytes | None, key: bytes | None, *,
                on_delivered: Callable[[Message], None] | None = None, **kwargs: Any) -> None:
        """Produce one record, waiting for room in the local queue. `on_delivered` hears of its delivery;
        a failure is latched. Records sent on the hot path through `raw.produce` have no callback: their
        failed delivery fails the commit all the same."""
        if on_delivered is not None:
            def delivered(error: KafkaError | None, message: Message) -> None:
                if error is not None:
                    self.failures.append(error)
                else:
                    on_delivered(message)
            kwargs["on_delivery"] = delivered
        while True:
            try:
                self.raw.produce(topic, value, key, **kwargs)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                self.raw.poll(0.05)

    def flush(self, timeout_s: float) -> None:
        """Wait for every record; undelivered or failed ones fail this transaction (abort it)."""
        remaining = self.raw.flush(timeout_s)
        if remaining or self.failures:
            reason = str(self.failures[0]) if self.failures else f"{remaining} records undelivered"
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, reason, txn_requires_abort=True))

    def send_offsets(self, offsets: list[Any], group_metadata: Any, timeout_s: float) -> None:
        """Add the consumer's offsets to the transaction within `timeout_s` (and a grace): a retriable failure
        or a call that does not return in time fails the transaction abortably."""
        raw = self.raw
        outcome: list[BaseException | None] = []

        def call() -> None:
            try:
                raw.send_offsets_to_transaction(offsets, group_metadata, timeout_s)
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                outcome.append(exc)

        caller = threading.Thread(target=call, name=f"send-offsets {self.transactional_id}", daemon=True)
        caller.start()
        caller.join(timeout_s + SEND_OFFSETS_GRACE_S)
        if not outcome:
            self._replace_stuck(timeout_s, caller)
        error = outcome[0]
        if isinstance(error, KafkaException) and error.args[0].retriable() and not error.args[0].txn_requires_abort():
            raise KafkaException(KafkaError(error.args[0].code(), str(error.args[0]), txn_requires_abort=True))
        if error is not None:
            raise error

    def _replace_stuck(self, timeout_s: float, caller: threading.Thread) -> None:
        """The current producer is stuck in a call: a successor takes the id, and the turn fails abortably."""
        log.error("send_offsets_to_transaction of %s has not returned in %.0f s: a new producer fences it",
                  self.transactional_id, timeout_s + SEND_OFFSETS_GRACE_S)
        self.stuck = [(raw, thread) for raw, thread in self.stuck if thread.is_alive()]
        self.stuck.append((self.raw, caller))
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            try:
                self.raw = self._initialised()
                break
            except KafkaException as exc:
                if attempt == REPLACE_ATTEMPTS or is_fenced(exc.args[0]):
                    raise
                log.warning("a successor for %s failed to init (%s); trying again", self.transactional_id,
                            exc.args[0])
        self.in_transaction = False
        raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "send_offsets_to_transaction stuck past its timeout",
                                        txn_requires_abort=True))

    def commit(self, timeout_s: float, deadline_s: float) -> None:
        """Commit, retrying what the broker says is retriable, with backoff, for at most `deadline_s`."""
        give_up = time.monotonic() + deadline_s
        pause = COMMIT_BACKOFF_S
        while True:
            try:
                self.raw.commit_transaction(timeout_s)
                self.in_transaction = False
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() + pause > give_up:
                    raise
                log.info("retrying the commit of %s in %.1f s: %s", self.transactional_id, pause, exc.args[0])
                time.sleep(pause)
                pause = min(MAX_BACKOFF_S, pause * 2)

    def abort(self, timeout_s: float) -> None:
        """Abort the open transaction, or replace the producer when the abort fails; raises when fenced.
        Nothing to do when no transaction is open (a stuck producer's successor has none)."""
        if not self.in_transaction:
            return
        try:
            self.raw.abort_transaction(timeout_s)
            self.in_transaction = False
        except KafkaException as exc:
            if is_fenced(exc.args[0]):
                raise
            log.warning("aborting %s failed (%s): a new producer aborts it", self.transactional_id, exc.args[0])
            self.raw.purge()
            self.raw = self._initialised()
            self.in_transaction = False
