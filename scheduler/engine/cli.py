"""`scheduler run`: one scheduler process in the foreground.

The exit statuses are in `EXIT_STATUS` (docs/operations.md)."""
from __future__ import annotations

import argparse
import logging
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from scheduler.cli_support import EXIT_BAD_INPUT, add_renamed, say
from scheduler.config import Settings
from scheduler.health.endpoint import DEFAULT_BIND
from scheduler.timing.cli_values import duration_type

if TYPE_CHECKING:
    from scheduler.engine.config import EngineConfig
    from scheduler.engine.metrics import EngineMetrics
    from scheduler.health.probes import Probe

EXIT_STATE_IN_USE = 3
EXIT_STATUS = ("Exit status: 0 stopped by SIGTERM/SIGINT (turn committed, group left); 2 a setup it cannot run "
               "with (an instance id that cannot name a directory, a replication factor the cluster cannot hold "
               "for a topic it must create); 3 another process holds this instance's state dir; 1 anything "
               "unexpected (with its traceback).")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subparsers.add_parser("run", help="run one scheduler process (joins the consumer group)",
                                description=EXIT_STATUS)
    run.add_argument("--instance-id", default=socket.gethostname(),
                     help="unique and stable per process (default: the host name): it names the transactional id, "
                          "so a restart fences its zombie, and the state dir <state-dir>/<prefix>/<instance-id>, so "
                          "a restart under the same id reuses its stores instead of restoring them from the changelogs")
    run.add_argument("--state-dir", type=Path, help="local RocksDB state (default: $SCHEDULER_STATE_DIR); one "
                                                    "process per instance id in it, enforced by a lock")
    run.add_argument("--horizon", type=duration_type("s", bare_unit="s"), default=120.0, metavar="DURATION",
                     help="how far ahead occurrences are kept materialized: a duration, or seconds (default 2m)")
    run.add_argument("--trigger-rate", type=float, default=1_000_000.0,
                     help="default per-tenant dispatch rate limit (occurrences/s)")
    run.add_argument("--tenant-rate", action="append", default=[], metavar="TENANT=RATE",
                     help="per-tenant dispatch rate limit override (repeatable)")
    run.add_argument("--catch-up-rate", type=float, default=100.0, help="per-tenant catch-up rate (occurrences/s)")
    run.add_argument("--metrics-port", type=int, default=0,
                     help="serve Prometheus metrics at /metrics, and the probes /healthz and /readyz, on this "
                          "port (0: disabled)")
    run.add_argument("--metrics-bind", default=DEFAULT_BIND, metavar="ADDRESS",
                     help=f"address the metrics port listens on (default {DEFAULT_BIND}; 0.0.0.0 for a "
                          "Prometheus or an orchestrator outside the host or container)")
    run.add_argument("--dispatch-budget", type=int, default=20_000,
                     help="occurrences sent per transaction at most (the rest follow in the next turns)")
    run.add_argument("--input-batch", type=int, default=1_000,
                     help="input records a turn (one transaction) takes at most: more amortizes a transaction's "
                          "cost over more commands in a bulk load, and makes each turn, and so dispatch, wait longer")
    add_renamed(run, "--input-slice", "--input-slice-ms", "input_slice_ms", duration_type(), int,
                "a turn stops taking input records after this long (default 500ms) and leaves the rest to the "
                "next turns, so a bulk load of CreateBatch records does not hold dispatch back", "500ms", default=500)
    run.add_argument("--stage-min", type=int, default=40_000,
                     help="strict occurrences due at one instant from which the burst is produced ahead in a "
                          "transaction committed at the instant (0: never stage); see "
                          "docs/decisions/0002-staged-bursts.md")
    run.add_argument("--stage-rate", type=float, default=50_000.0,
                     help="staging rate (occurrences/s) assumed until a stage has measured it: it sets the first "
                          "stage's lead (its preparation in memory, which holds back nothing)")
    run.add_argument("--stage-produce-rate", type=float, default=140_000.0,
                     help="records/s a stage produces and flushes, assumed until a stage has measured it: it "
                          "sets the first stage's produce window (a window too short makes its commit late)")
    run.add_argument("--open-tenants", action="store_true",
                     help="take commands for any tenant name, creating its topics on first sight, with the "
                          "engine's default quotas (development, the demo); by default a tenant must be "
                          "registered (`scheduler tenants register`) or its commands are rejected with UNKNOWN_TENANT")
    run.add_argument("--standbys", type=_count, default=1, metavar="N",
                     help="warm copies of each partition kept by other processes of the group, tailing its "
                          "changelogs so a takeover replays only the tail (0: none; a lone process keeps none); "
                          "see docs/decisions/0001-stream-runtime.md")
    run.add_argument("--client-config", type=Path, metavar="FILE",
                     help="librdkafka settings (key=value lines) for every client of the process, e.g. "
                          "security.protocol=SASL_SSL, sasl.* and ssl.ca.location "
                          "(docs/control-plane.md, \"Encryption in transit\"; default $SCHEDULER_CLIENT_CONFIG)")
    run.add_argument("--log-level", default="INFO")
    run.set_defaults(handler=_run)


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def _run(args: argparse.Namespace) -> int:
    from scheduler.engine.config import EngineConfig
    from scheduler.kafka.client_config import client_config_of

    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = Settings.from_env()
    rates = {}
    for item in args.tenant_rate:
        tenant, _, rate = item.partition("=")
        rates[tenant] = float(rate)
    config = EngineConfig(
        bootstrap_servers=settings.bootstrap_servers,
        prefix=settings.topic_prefix,
        state_dir=args.state_dir or settings.state_dir,
        instance_id=args.instance_id,
        horizon_ms=int(args.horizon * 1000),
        dispatch_budget=args.dispatch_budget,
        input_batch=args.input_batch,
        input_slice_ms=args.input_slice_ms,
        stage_min=args.stage_min,
        stage_rate_per_s=args.stage_rate,
        stage_produce_rate_per_s=args.stage_produce_rate,
        trigger_rate_per_s=args.trigger_rate,
        tenant_trigger_rates=rates,
        catch_up_rate_per_s=args.catch_up_rate,
        open_tenants=args.open_tenants,
        standbys=args.standbys,
        client_config=client_config_of(args),
    )
    from scheduler.engine.state_dir import StateDirInUse, StateDirLock
    from scheduler.kafka.replication import ReplicationError

    try:
        directory = config.instance_dir
    except ValueError as exc:  # an instance id no directory can have
        say(f"scheduler run: {exc}")
        return EXIT_BAD_INPUT
    try:
        with StateDirLock(directory):
            return _serve(args, config)
    except StateDirInUse as exc:
        say(f"scheduler run: {exc}")
        return EXIT_STATE_IN_USE
    except ReplicationError as exc:  # SCHEDULER_REPLICATION_FACTOR above the brokers, and topics to create
        say(f"scheduler run: {exc}")
        return EXIT_BAD_INPUT


def _serve(args: argparse.Namespace, config: EngineConfig) -> int:
    """The process, from its metrics endpoint to the end of its last turn, while it holds its state dir."""
    from scheduler.engine.runtime import SchedulerProcess

    log_failover_bound(config)
    process = SchedulerProcess(config)
    if args.metrics_port:
        from scheduler.health.endpoint import serve

        live, ready = _probes(process.metrics)
        serve(args.metrics_bind, args.metrics_port, process.metrics.registry, live, ready)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        process.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    process.run()
    return 0


def log_failover_bound(config: EngineConfig) -> None:
    """The takeover time the broker's group settings imply, read once at start: on a stock Kafka (45 s
    sessions) failover is slow without anything else saying so (docs/operations.md, broker settings)."""
    from confluent_kafka import KafkaException

    from scheduler.doctor import checks, facts
    from scheduler.kafka.clients import connection

    log = logging.getLogger("scheduler.engine.failover")
    admin = facts.admin_for(connection(config.bootstrap_servers, config.client_config))
    try:
        brokers = admin.list_topics(timeout=10).brokers
        finding = checks.check_group_settings(facts.broker_configs(admin, min(brokers), 10))
    except (KafkaException, ValueError) as exc:
        log.info("could not read the broker's group settings (%s): the failover bound is unknown", exc)
        return
    if finding.level == checks.WARN:
        log.warning("failover bound: %s; fix: %s", finding.detail, finding.fix)
    else:
        log.info("failover bound: %s", finding.detail)


def _probes(metrics: EngineMetrics) -> tuple[Callable[[], Probe], Callable[[], Probe]]:
    """/healthz: the loop turns; /readyz: also every owned partition restored. Read from the registry's
    gauges, which the loop sets, rather than from the assignment's dicts, which the HTTP thread must not
    iterate while the loop changes them."""
    from scheduler.health.probes import alive, scheduler_ready

    def live() -> Probe:
        return alive(metrics.heartbeat.last, time.monotonic())

    def ready() -> Probe:
        gauge = metrics.registry.get_sample_value
        return scheduler_ready(live(), int(gauge("scheduler_owned_partitions") or 0),
                               int(gauge("scheduler_partitions_restoring") or 0))

    return live, ready
