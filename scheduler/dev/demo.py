"""`scheduler demo`: the whole system on this machine, as a tour: a registered demo tenant and its schedules, a
worker printing occurrences, the HTTP API and console beside them (address and key printed), and the
reconcile summary of the audit ledger at the end."""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta, timezone
from types import FrameType

from scheduler.config import Settings, state_home
from scheduler.timing.cli_values import duration_type
from scheduler.worker.occurrence import AttemptContext, Occurrence

TENANT = "demo"


def register(subparsers: argparse._SubParsersAction) -> None:
    demo = subparsers.add_parser("demo", help="run broker, scheduler, demo schedules and a printing worker")
    demo.add_argument("--duration", type=duration_type("s", bare_unit="s"), default=0, metavar="DURATION",
                      help="stop after this long: a duration, or seconds (0: until Ctrl-C)")
    demo.set_defaults(handler=_demo)


def _bootstrap() -> str:
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        return os.environ["KAFKA_BOOTSTRAP_SERVERS"]
    from scheduler.broker.local import LocalBroker

    broker = LocalBroker(state_home() / "broker")
    if not broker.is_running():
        print("starting the local Kafka broker (first run downloads the jars)...", file=sys.stderr)
        broker.start()
    return broker.bootstrap


def _schedules(now: datetime) -> list[tuple[str, dict]]:
    from scheduler.control.client import make_spec

    soon = (now + timedelta(seconds=15)).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    anchor_ms = int(now.timestamp()) * 1000
    return [
        ("heartbeat-5s", make_spec("rate", "every 5s", anchor_at_ms=anchor_ms, payload=b"ping")),
        ("report-every-minute", make_spec("cron", "* * * * *", "Europe/London", priority="HIGH",
                                          payload=b"build the report")),
        ("one-shot-in-15s", make_spec("once", soon, payload=b"hello once")),
        ("flexible-every-minute", make_spec("cron", "* * * * *", "America/New_York", priority="LOW",
                                            flexible_window_ms=30_000, payload=b"spread me")),
    ]


def print_occurrence(occurrence: Occurrence, ctx: AttemptContext) -> None:
    """The demo's handler, also the example worker of docker-compose.yml: one line per occurrence, with its lag."""
    now = datetime.now(timezone.utc)
    lag = (now - occurrence.scheduled_for).total_seconds()
    print(f"{now:%H:%M:%S.%f}"[:-3] + f"  {occurrence.tenant}/{occurrence.schedule_id:<22} "
          f"v{occurrence.schedule_version} attempt {occurrence.attempt} "
          f"scheduled_for={occurrence.scheduled_for:%H:%M:%S} lag={lag:.2f}s payload={occurrence.payload!r}",
          flush=True)


def _demo(args: argparse.Namespace) -> int:
    from scheduler.audit import demo_ledger
    from scheduler.broker.ports import free_port
    from scheduler.control.client import SchedulerClient
    from scheduler.dev.demo_console import register_tenant, start_api
    from scheduler.kafka.admin import ensure_topics
    from scheduler.wire.topology import Topology
    from scheduler.worker import Worker

    bootstrap = _bootstrap()
    settings = Settings.from_env()
    ensure_topics(bootstrap, Topology.load(), settings.topic_prefix, tenants=[TENANT])
    register_tenant(bootstrap, settings.topic_prefix, TENANT)
    ledger = demo_ledger.start(bootstrap, settings.topic_prefix)
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap}
    metrics_port = free_port()
    api = start_api(bootstrap, settings.topic_prefix, TENANT, f"http://127.0.0.1:{metrics_port}/metrics",
                    state_home() / "demo" / "api.log")
    engine = subprocess.Popen([sys.executable, "-m", "scheduler", "run", "--instance-id", "demo",
                               "--metrics-port", str(metrics_port), "--log-level", "WARNING"], env=env)
    worker = Worker(bootstrap, settings.topic_prefix, TENANT, print_occurrence)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        worker.stop()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    schedules = _schedules(datetime.now(timezone.utc))
    # A flexible occurrence is sent anywhere in its window: the summary stops where every one was due.
    spread_s = max(spec["flexible_window_ms"] or 0 for _, spec in schedules) / 1000
    try:
        with SchedulerClient(bootstrap, settings.topic_prefix, timeout_s=60) as client:
            for schedule_id, spec in schedules:
                result = client.create(TENANT, spec, schedule_id=schedule_id, idempotency_key=schedule_id)
                fires = ", ".join(datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%H:%M:%S")
                                  for ms in result["next_fires_ms"][:3])
                print(f"schedule {schedule_id}: version {result['version']}, next fires {fires}", flush=True)
        print(f"worker for tenant {TENANT!r} is printing occurrences (Ctrl-C to stop)...", flush=True)
        if args.duration:
            threading.Timer(args.duration, worker.stop).start()
        worker.run()
    finally:
        api.stop()
        engine.send_signal(signal.SIGTERM)
        engine.wait(30)
        print("scheduler and API stopped; the broker keeps running (`scheduler broker stop` stops it)",
              file=sys.stderr)
        if ledger is not None:
            demo_ledger.print_summary(ledger, TENANT, settle_s=5.0 + spread_s)
    return 0
