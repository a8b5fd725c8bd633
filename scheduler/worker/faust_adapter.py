"""A faust-streaming agent over a tenant's occurrence topics, with the worker's checks and records.

    app = faust.App("billing-workers", broker="kafka://localhost:9092")
    attach(app, bootstrap="localhost:9092", prefix="sched", tenant="billing", handler=charge)

The agent decodes each Occurrence (raw bytes, as the scheduler writes them), skips stale ones
with SKIPPED_STALE, writes STARTED, runs the handler (a plain function runs in a thread, a
coroutine function on faust's loop) and writes SUCCEEDED or FAILED, exactly as `Worker` does.

Every attempt event is sent immediately (not attached to the event's acknowledgement) and awaited
until the broker has it, before the agent takes the next record; faust commits an offset only
after its record was processed, so the outcome is always written first (at-least-once). faust's
producer (aiokafka) hashes keys with Java's murmur2, so events land in the schedule's partition.
Priorities are not ordered here: the agent reads all the tenant's priority topics as one stream.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import Any

import faust

from scheduler.wire.codec import Codec, DecodeError, RecordCodec
from scheduler.wire.topology import Topology
from scheduler.worker.attempt import Event, Handler, run_attempt
from scheduler.worker.occurrence import AttemptContext, Occurrence
from scheduler.worker.view import ScheduleView
from scheduler.worker.view_follower import ViewFollower
from scheduler.worker.worker import DEFAULT_PRIORITIES, default_worker_id, wall_clock_ms

log = logging.getLogger(__name__)

AsyncHandler = Callable[[Occurrence, AttemptContext], Awaitable[object]]


def attach(
    app: faust.App,
    *,
    bootstrap: str,
    prefix: str,
    tenant: str,
    handler: Handler | AsyncHandler,
    priorities: Sequence[str] = DEFAULT_PRIORITIES,
    worker_id: str | None = None,
    codec: RecordCodec | None = None,
    topology: Topology | None = None,
    view_catch_up_s: float = 10.0,
    client_config: Mapping[str, str] | None = None,
) -> Any:
    """Register the agent on `app` and return it.

    `client_config` (librdkafka settings, e.g. SASL credentials) is for the schedule-view follower;
    the app's own connection takes its credentials from faust (`broker_credentials`)."""
    topology = topology or Topology.load()
    codec = codec or Codec.default()
    worker_id = worker_id or default_worker_id()
    source = app.topic(*(topology.topic_name("occurrences", prefix, tenant=tenant, priority=p) for p in priorities),
                       key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    attempts = app.topic(topology.topic_name("attempts", prefix), key_type=bytes, value_type=bytes,
                         key_serializer="raw", value_serializer="raw")
    view_topic = topology.topic_name("schedule-view", prefix, tenant=tenant)
    view = ScheduleView()

    async def record(event: Event) -> None:
        pending = await attempts.send(key=event["schedule_id"].encode(),
                                      value=codec.encode("AttemptEvent", event), force=True)
        await pending

    async def occurrences(stream: AsyncIterable[bytes]) -> None:
        loop = asyncio.get_running_loop()
        follower = await asyncio.to_thread(_start_follower, bootstrap, view_topic, view, codec, view_catch_up_s,
                                           client_config)
        run = _in_thread(handler, loop)

        def write_started(event: Event) -> None:
            asyncio.run_coroutine_threadsafe(record(event), loop).result()

        try:
            async for value in stream:
                try:
                    occurrence = Occurrence.from_record(codec.decode("Occurrence", value))
                except DecodeError as error:
                    log.error("skipping a record that is not an Occurrence: %s", error)
                    continue
                ctx = AttemptContext.fresh()
                try:
                    outcome = await asyncio.to_thread(run_attempt, occurrence, ctx, run, view, worker_id,
                                                      wall_clock_ms, write_started)
                except asyncio.CancelledError:
                    ctx.cancelled.set()  # the app is stopping: tell the handler, its record is redelivered
                    raise
                if outcome is not None:
                    await record(outcome)
        finally:
            await asyncio.to_thread(follower.close)

    return app.agent(source, name=f"{prefix}-{tenant}-occurrences")(occurrences)


def _start_follower(bootstrap: str, topic: str, view: ScheduleView, codec: RecordCodec,
                    catch_up_s: float, client_config: Mapping[str, str] | None) -> ViewFollower:
    follower = ViewFollower(bootstrap, topic, view, codec, client_config)
    follower.catch_up(catch_up_s)
    return follower


def _in_thread(handler: Handler | AsyncHandler, loop: asyncio.AbstractEventLoop) -> Handler:
    """The handler as run_attempt calls it, from a worker thread: coroutines go back to faust's loop."""
    if not inspect.iscoroutinefunction(handler):
        return handler

    def run(occurrence: Occurrence, ctx: AttemptContext) -> object:
        return asyncio.run_coroutine_threadsafe(handler(occurrence, ctx), loop).result()

    return run
