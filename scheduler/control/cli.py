"""`scheduler schedules|tenants|occurrences|api`: the control plane from a terminal or a script.

Human output by default, `--json` for scripts (one JSON document on stdout;
errors as {"code", "message"}). Exit codes scripts can rely on: 0 ok,
2 usage or validation error, 3 not found, 4 conflict (version, state, exists),
5 quota, 6 timeout or unavailable, 1 anything else; `schedules import` exits 7 when
some of its lines were rejected (the others were imported).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding

from scheduler.control.acls import grant_worker
from scheduler.api.keys import create_key, list_keys, revoke_key
from scheduler.api.models import schedule_json
from scheduler.control.bulk import BULK_LINGER_MS, DEFAULT_WINDOW
from scheduler.control.client import (
    SPEC_DEFAULTS,
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerClient,
    SchedulerError,
    Unavailable,
    ValidationError,
    make_spec,
    preview,
)
from scheduler.config import Settings
from scheduler.timing.instants import to_datetime, to_ms
from scheduler.control.tenants import QUOTA_DEFAULTS, TenantRegistry, validate_tenant_name
from scheduler.timing.instants import format_utc, parse_instant
from scheduler.wire import vocabulary
from scheduler.wire.topology import Topology
from scheduler.kafka.views import ScheduleView, ViewUnavailable

Record = dict[str, Any]

EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_CONFLICT, EXIT_QUOTA, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4, 5, 6
EXIT_REJECTED = 7  # `schedules import`: some lines were rejected (the others went in)
EXIT_BY_ERROR: tuple[tuple[type[SchedulerError], int], ...] = (
    (ValidationError, EXIT_USAGE), (NotFound, EXIT_NOT_FOUND), (Conflict, EXIT_CONFLICT),
    (QuotaExceeded, EXIT_QUOTA), (Unavailable, EXIT_UNAVAILABLE),
)

if TYPE_CHECKING:
    from scheduler.api.shared_keys import SharedKeyStore

KEYS_HELP = ("API key file, for a single server (default: the keys shared by every server, in the "
             "compacted <prefix>.api-keys topic)")

# CLI flag -> ScheduleSpec field, for the optional spec fields (argparse dest = field name).
# The optional spec fields, derived from the schema (argparse dest = field name): instants, numbers, choices.
_SPEC_INSTANT_FLAGS = {"start": "start_at_ms", "end": "end_at_ms", "anchor": "anchor_at_ms"}
_SPEC_INT_FLAGS = tuple(name for name in vocabulary.integer_fields("ScheduleSpec")
                        if name not in _SPEC_INSTANT_FLAGS.values())
_SPEC_CHOICE_FLAGS = {name: vocabulary.choices(enum) for name, enum in vocabulary.enum_fields("ScheduleSpec").items()
                      if name != "kind"}


def instant_ms(text: str) -> int:
    """An RFC 3339 instant, or epoch milliseconds."""
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return to_ms(parse_instant(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an RFC 3339 instant nor epoch ms: {text!r} ({exc})") from exc


def _utc(ms: int | None) -> str:
    return "-" if ms is None else format_utc(to_datetime(ms))


# -- argument groups -------------------------------------------------------------

def _common(parser: argparse.ArgumentParser) -> None:
    settings = Settings.from_env()
    parser.add_argument("--bootstrap", default=settings.bootstrap_servers, help="Kafka bootstrap servers")
    parser.add_argument("--prefix", default=settings.topic_prefix, help="topic prefix")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for a result")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def _tenant_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenant", required=True)


def _spec_args(parser: argparse.ArgumentParser, kind_required: bool) -> None:
    kind = parser.add_mutually_exclusive_group(required=kind_required)
    kind.add_argument("--cron", help='five-field cron expression, e.g. "0 9 * * MON-FRI"')
    kind.add_argument("--every", help="fixed rate, e.g. 90m (anchored at --anchor, default: creation)")
    kind.add_argument("--at", help="one-shot: an RFC 3339 instant or a local date-time in --tz")
    kind.add_argument("--rrule", help='RFC 5545 rule, e.g. "DTSTART:20260113T090000 RRULE:FREQ=MONTHLY;BYDAY=2TU"')
    parser.add_argument("--tz", dest="time_zone", help="IANA time zone (default UTC)")
    for flag in _SPEC_INSTANT_FLAGS:
        parser.add_argument(f"--{flag}", type=instant_ms, help=f"{flag} instant (RFC 3339 or epoch ms)")
    for name in _SPEC_INT_FLAGS:
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=int)
    for name, choices in _SPEC_CHOICE_FLAGS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=str.upper, choices=choices)
    parser.add_argument("--payload", help="payload (UTF-8 text)")


def spec_fields(args: argparse.Namespace) -> Record:
    """The spec fields given on the command line (nothing else)."""
    fields: Record = {}
    if args.cron is not None:
        fields.update(kind="CRON", expression=args.cron)
    elif args.every is not None:
        every = args.every if args.every.lower().startswith("every") else f"every {args.every}"
        fields.update(kind="RATE", expression=every)
    elif args.at is not None:
        fields.update(kind="ONCE", expression=args.at)
    elif args.rrule is not None:
        fields.update(kind="RRULE", expression=args.rrule)
    for name in ("time_zone", *_SPEC_INT_FLAGS, *_SPEC_CHOICE_FLAGS):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    for flag, name in _SPEC_INSTANT_FLAGS.items():
        if getattr(args, flag) is not None:
            fields[name] = getattr(args, flag)
    if args.payload is not None:
        fields["payload"] = args.payload.encode()
    return fields


def _quota_args(parser: argparse.ArgumentParser) -> None:
    for name, default in QUOTA_DEFAULTS.items():
        parser.add_argument(f"--{name.replace('_', '-')}", dest=name, type=type(default),
                            help=f"(default {default})")


def _quotas(args: argparse.Namespace) -> Record:
    return {name: getattr(args, name) for name in QUOTA_DEFAULTS if getattr(args, name) is not None}


# -- output ------------------------------------------------------------------------

def _emit(args: argparse.Namespace, data: Any, human: Callable[[Any], str]) -> int:
    print(json.dumps(data, indent=2, default=str) if args.json else human(data))
    return EXIT_OK


def _schedule_line(state: Record) -> str:
    spec = state["spec"]
    return (f"{state['schedule_id']}  {state['state']}  v{state['version']}  {spec['kind']} "
            f"{spec['expression']!r} {spec['time_zone']}  next {_utc(state.get('next_fire_ms'))}")


def _result_text(result: Record) -> str:
    fires = ", ".join(_utc(ms) for ms in result.get("next_fires_ms") or []) or "-"
    return f"{result['command_type']} {result['schedule_id']}: {result['status']} version {result['version']}; next fires: {fires}"


def _fires_text(fires: list[int]) -> str:
    return "\n".join(_utc(ms) for ms in fires)


# -- handlers ----------------------------------------------------------------------

def _guarded(fn: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Maps errors to exit codes, and prints them as text or JSON."""
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except SchedulerError as exc:
            code = next((c for kind, c in EXIT_BY_ERROR if isinstance(exc, kind)), EXIT_ERROR)
            return _fail(args, exc.reason, exc.message, code)
        except ViewUnavailable as exc:
            return _fail(args, "UNAVAILABLE", str(exc), EXIT_UNAVAILABLE)
    return run


def _fail(args: argparse.Namespace, reason: str, message: str, code: int) -> int:
    if args.json:
        print(json.dumps({"code": reason, "message": message}))
    print(f"error: {reason}: {message}", file=sys.stderr)
    return code


def _client(args: argparse.Namespace) -> SchedulerClient:
    return SchedulerClient(args.bootstrap, args.prefix, args.timeout)


def _command(args: argparse.Namespace, call: Callable[[SchedulerClient], Record]) -> int:
    with _client(args) as client:
        result = call(client)
    return _emit(args, result, _result_text)


def schedules_create(args: argparse.Namespace) -> int:
    fields = spec_fields(args)
    spec = make_spec(fields.pop("kind"), fields.pop("expression"), fields.pop("time_zone", "UTC"), **fields)
    return _command(args, lambda c: c.create(args.tenant, spec, schedule_id=args.id,
                                              idempotency_key=args.idempotency_key))


def schedules_import(args: argparse.Namespace) -> int:
    """Exit 0 when every line was accepted, EXIT_REJECTED when any was rejected, 6 when any got no result."""
    from scheduler.control.schedule_import import import_lines, summary_text

    try:
        source = sys.stdin if args.file == "-" else open(args.file, encoding="utf-8")
    except OSError as exc:
        raise ValidationError("USAGE", f"cannot read {args.file}: {exc.strerror}") from exc
    with source, SchedulerClient(args.bootstrap, args.prefix, args.timeout, linger_ms=BULK_LINGER_MS) as client:
        summary = import_lines(client, source, args.window)
    _emit(args, summary.as_json(), lambda _: summary_text(summary))
    if "TIMEOUT" in summary.rejected:
        return EXIT_UNAVAILABLE
    return EXIT_REJECTED if summary.rejections else EXIT_OK


def schedules_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        state = client.get(args.tenant, args.schedule_id)
    return _emit(args, schedule_json(state), _schedule_detail)


def _schedule_detail(state: Record) -> str:
    spec = state["spec"]
    lines = [_schedule_line(state), f"  created {_utc(state['created_at_ms'])}  updated {_utc(state['updated_at_ms'])}"
             f"  fired {state['fired_count']}  pending {len(state['pending'])}"]
    lines += [f"  {name}: {spec[name]}" for name in SPEC_DEFAULTS if name not in ("kind", "expression", "payload")
              and spec.get(name) is not None]
    return "\n".join(lines)


def schedules_list(args: argparse.Namespace) -> int:
    with _client(args) as client:
        states = client.list(args.tenant, args.state)
    return _emit(args, [schedule_json(s) for s in states],
                 lambda rows: "\n".join(_schedule_line(s) for s in rows) or "(no schedules)")


def schedules_update(args: argparse.Namespace) -> int:
    """Only the given spec flags change; the rest comes from the current spec, conditional on its version."""
    with _client(args) as client:
        current = client.get(args.tenant, args.schedule_id)
        spec = {**current["spec"], **spec_fields(args)}
        expected = current["version"] if args.expected_version is None else args.expected_version
        if args.dry_run:
            diff = client.update(args.tenant, args.schedule_id, spec, expected, dry_run=True, count=args.count)
            return _emit(args, diff, _diff_text)
        result = client.update(args.tenant, args.schedule_id, spec, expected)
    return _emit(args, result, _result_text)


def _diff_text(diff: Record) -> str:
    rows = [f"{'before':<22}  after"]
    before, after = diff["before_ms"], diff["after_ms"]
    for i in range(max(len(before), len(after))):
        left = _utc(before[i]) if i < len(before) else ""
        right = _utc(after[i]) if i < len(after) else ""
        rows.append(f"{left:<22}  {right}{'' if left == right else '  *'}")
    return f"dry run of {diff['schedule_id']} v{diff['version']} ({diff['state']}), nothing sent:\n" + "\n".join(rows)


def _simple(verb: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        return _command(args, lambda c: getattr(c, verb)(args.tenant, args.schedule_id, args.expected_version))
    return run


def schedules_trigger(args: argparse.Namespace) -> int:
    return _command(args, lambda c: c.trigger_now(args.tenant, args.schedule_id))


def schedules_backfill(args: argparse.Namespace) -> int:
    return _command(args, lambda c: c.backfill(args.tenant, args.schedule_id, args.from_ms, args.to_ms,
                                               args.overlap))


def schedules_preview(args: argparse.Namespace) -> int:
    """Of a stored schedule (with its id) or of the spec given by flags; computed locally."""
    if args.schedule_id is not None:
        if args.tenant is None:
            raise ValidationError("USAGE", "--tenant is required with a schedule id")
        with _client(args) as client:
            state = client.get(args.tenant, args.schedule_id)
        fires = preview(state["spec"], args.count, args.after, state["fired_count"])
    else:
        fields = spec_fields(args)
        if "kind" not in fields:
            raise ValidationError("USAGE", "give a schedule id or one of --cron, --every, --at, --rrule")
        spec = make_spec(fields.pop("kind"), fields.pop("expression"), fields.pop("time_zone", "UTC"), **fields)
        fires = preview(spec, args.count, args.after)
    return _emit(args, fires, _fires_text)


def occurrences_get(args: argparse.Namespace) -> int:
    with _client(args) as client:
        status = client.occurrence(args.tenant, args.occurrence_id)
    return _emit(args, status, lambda s: (
        f"{s['occurrence_id']}  {s['state']}  schedule {s['schedule_id']} v{s['schedule_version']}  "
        f"scheduled_for {_utc(s['scheduled_for_ms'])}  attempt {s['attempt']}\n"
        + "\n".join(f"  {a['kind']} attempt {a['attempt']} at {_utc(a['at_ms'])}"
                    f"{'  ' + a['error_message'] if a.get('error_message') else ''}" for a in s["attempts"])))


def occurrences_rerun(args: argparse.Namespace) -> int:
    return _command(args, lambda c: c.rerun(args.tenant, args.occurrence_id, args.schedule))


def _registry(args: argparse.Namespace) -> TenantRegistry:
    return TenantRegistry(args.bootstrap, args.prefix, args.timeout)


def _tenant_text(t: Record) -> str:
    return f"{t['tenant']}  " + "  ".join(f"{name}={t[name]:g}" for name in QUOTA_DEFAULTS)


def tenants_register(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return _emit(args, registry.register(args.name, **_quotas(args)), _tenant_text)


def tenants_get(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return _emit(args, registry.get(args.name), _tenant_text)


def tenants_list(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return _emit(args, registry.list(), lambda ts: "\n".join(map(_tenant_text, ts)) or "(no tenants)")


def tenants_set_quota(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return _emit(args, registry.set_quota(args.name, **_quotas(args)), _tenant_text)


def tenants_delete(args: argparse.Namespace) -> int:
    with _registry(args) as registry, ScheduleView(args.bootstrap, args.prefix) as schedules:
        registry.delete(args.name, schedules, force=args.force)
    return _emit(args, {"tenant": args.name, "deleted": True}, lambda d: f"deleted tenant {d['tenant']}")


def tenants_grant_worker(args: argparse.Namespace) -> int:
    """The password comes from the environment, so it shows neither in `ps` nor in shell history."""
    validate_tenant_name(args.name)
    password = os.environ.get(args.password_env, "")
    if not password:
        raise ValidationError("USAGE", f"${args.password_env} is empty or not set: put the worker's password there")
    try:
        bindings = grant_worker(args.bootstrap, Topology.load(), args.prefix, args.name, args.user, password,
                                args.timeout)
    except ValueError as exc:
        raise ValidationError("USAGE", str(exc)) from exc
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN):
            raise Unavailable("UNAVAILABLE", error.str()) from exc
        if error.code() == KafkaError.SECURITY_DISABLED:
            raise SchedulerError(error.name(), "the broker has no authorizer: start it with one, "
                                               "e.g. `scheduler broker start --sasl-port N`") from exc
        raise SchedulerError(error.name(), error.str()) from exc
    granted = {"tenant": args.name, "user": args.user, "acls": [_acl_json(b) for b in bindings]}
    return _emit(args, granted, _grant_text)


def _acl_json(binding: AclBinding) -> Record:
    return {"resource_type": binding.restype.name, "name": binding.name,
            "pattern": binding.resource_pattern_type.name, "operation": binding.operation.name}


def _grant_text(granted: Record) -> str:
    acls = (f"  {a['operation']} {a['resource_type']} {a['name']} ({a['pattern']})" for a in granted["acls"])
    return f"User:{granted['user']} may now run workers of {granted['tenant']}:\n" + "\n".join(acls)


def api_serve(args: argparse.Namespace) -> int:
    from scheduler.api.server import serve  # uvicorn and FastAPI load only for the server

    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValidationError("USAGE", "give both --tls-cert and --tls-key, or neither")
    serve(args.bootstrap, args.prefix, args.host, args.port, args.keys, args.timeout, args.tls_cert, args.tls_key,
          args.metrics_url, args.forecast_hours)
    return EXIT_OK


def _shared_keys(args: argparse.Namespace) -> SharedKeyStore:
    from scheduler.api.shared_keys import SharedKeyStore

    return SharedKeyStore(args.bootstrap, args.prefix, args.timeout)


def api_keys_create(args: argparse.Namespace) -> int:
    if (args.tenant is None) == (not args.admin):
        raise ValidationError("USAGE", "give exactly one of --tenant T and --admin")
    tenant = None if args.admin else args.tenant
    if args.keys is not None:
        key, where = create_key(args.keys, tenant), str(args.keys)
    else:
        with _shared_keys(args) as store:
            key, where = store.create(tenant), store.topic
    return _emit(args, {"key": key, "tenant": args.tenant, "admin": args.admin},
                 lambda d: f"{d['key']}\n(shown once; only its hash is stored in {where})")


def api_keys_list(args: argparse.Namespace) -> int:
    if args.keys is not None:
        found = list_keys(args.keys)
    else:
        with _shared_keys(args) as store:
            found = store.list()
    return _emit(args, found, lambda d: "\n".join(f"{k['key_id']}  {k['tenant'] or '(admin)'}" for k in d))


def api_keys_revoke(args: argparse.Namespace) -> int:
    if args.keys is not None:
        if not revoke_key(args.keys, args.key_id):
            raise NotFound("UNKNOWN_KEY", f"no key {args.key_id!r} in {args.keys}")
    else:
        with _shared_keys(args) as store:
            store.revoke(args.key_id)
    return _emit(args, {"revoked": args.key_id}, lambda d: f"revoked {d['revoked']}")


# -- registration ------------------------------------------------------------------

def _add(group: argparse._SubParsersAction, name: str, handler: Callable[[argparse.Namespace], int],
         help_text: str) -> argparse.ArgumentParser:
    parser = group.add_parser(name, help=help_text, description=help_text)
    _common(parser)
    parser.set_defaults(handler=_guarded(handler))
    return parser


def register(subparsers: argparse._SubParsersAction) -> None:
    schedules = subparsers.add_parser("schedules", help="create and manage schedules",
                                      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = schedules.add_subparsers(dest="verb", required=True)
    create = _add(verbs, "create", schedules_create, "create a schedule")
    _tenant_arg(create)
    _spec_args(create, kind_required=True)
    create.add_argument("--id", help="schedule id (default: derived from --idempotency-key, else random)")
    create.add_argument("--idempotency-key")
    bulk = _add(verbs, "import", schedules_import,
                "create schedules from JSON Lines, many in flight (docs/control-plane.md)")
    bulk.add_argument("file", help="JSON Lines file, one schedule a line; - for stdin")
    bulk.add_argument("--window", type=int, default=DEFAULT_WINDOW, help="commands in flight at most")
    get = _add(verbs, "get", schedules_get, "show one schedule")
    _tenant_arg(get)
    get.add_argument("schedule_id")
    listing = _add(verbs, "list", schedules_list, "list a tenant's schedules")
    _tenant_arg(listing)
    listing.add_argument("--state", type=str.upper, choices=vocabulary.choices("ScheduleStatus"))
    update = _add(verbs, "update", schedules_update, "change a schedule's spec (only the flags given)")
    _tenant_arg(update)
    update.add_argument("schedule_id")
    _spec_args(update, kind_required=False)
    update.add_argument("--expected-version", type=int, help="default: the version read before the change")
    update.add_argument("--dry-run", action="store_true", help="show next fires before/after; send nothing")
    update.add_argument("--count", type=int, default=5, help="fires shown by --dry-run")
    for verb in ("pause", "resume", "cancel"):
        parser = _add(verbs, verb, _simple(verb), f"{verb} a schedule")
        _tenant_arg(parser)
        parser.add_argument("schedule_id")
        parser.add_argument("--expected-version", type=int)
    trigger = _add(verbs, "trigger", schedules_trigger, "fire one occurrence now")
    _tenant_arg(trigger)
    trigger.add_argument("schedule_id")
    backfill = _add(verbs, "backfill", schedules_backfill, "replay the fires of a past range (at most 1000)")
    _tenant_arg(backfill)
    backfill.add_argument("schedule_id")
    backfill.add_argument("--from", dest="from_ms", type=instant_ms, required=True)
    backfill.add_argument("--to", dest="to_ms", type=instant_ms, required=True)
    backfill.add_argument("--overlap", type=str.upper, choices=_SPEC_CHOICE_FLAGS["overlap_policy"])
    prev = _add(verbs, "preview", schedules_preview, "next fires of a schedule or of a spec (local)")
    prev.add_argument("schedule_id", nargs="?")
    prev.add_argument("--tenant")
    prev.add_argument("--count", type=int, default=10)
    prev.add_argument("--after", type=instant_ms, help="fires strictly after this instant (default: now)")
    _spec_args(prev, kind_required=False)

    tenants = subparsers.add_parser("tenants",
                                    help="register tenants, set their quotas, grant their workers broker ACLs")
    tverbs = tenants.add_subparsers(dest="verb", required=True)
    reg = _add(tverbs, "register", tenants_register, "register a tenant: topics and quotas")
    reg.add_argument("name")
    _quota_args(reg)
    tget = _add(tverbs, "get", tenants_get, "show a tenant's quotas")
    tget.add_argument("name")
    _add(tverbs, "list", tenants_list, "list tenants")
    quota = _add(tverbs, "set-quota", tenants_set_quota, "change some of a tenant's quotas")
    quota.add_argument("name")
    _quota_args(quota)
    delete = _add(tverbs, "delete", tenants_delete, "delete a tenant (refused while it has live schedules)")
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="delete even with active or paused schedules")
    grant = _add(tverbs, "grant-worker", tenants_grant_worker,
                 "create a SCRAM-SHA-512 user and the broker ACLs a worker of the tenant needs")
    grant.add_argument("name")
    grant.add_argument("--user", required=True, help="SCRAM user name (principal User:NAME)")
    grant.add_argument("--password-env", required=True, metavar="VAR",
                       help="environment variable holding the user's password")

    occurrences = subparsers.add_parser("occurrences", help="inspect and re-run occurrences")
    overbs = occurrences.add_subparsers(dest="verb", required=True)
    oget = _add(overbs, "get", occurrences_get, "show an occurrence and its attempts")
    _tenant_arg(oget)
    oget.add_argument("occurrence_id")
    rerun = _add(overbs, "rerun", occurrences_rerun, "dispatch a finished or dead occurrence again")
    _tenant_arg(rerun)
    rerun.add_argument("occurrence_id")
    rerun.add_argument("--schedule", help="its schedule id (default: looked up)")

    api = subparsers.add_parser("api", help="serve the HTTP API; `api keys` manages API keys")
    _common(api)
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8080)
    api.add_argument("--keys", type=Path, help=KEYS_HELP)
    api.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS with this certificate (chain)")
    api.add_argument("--tls-key", type=Path, metavar="PEM", help="the private key of --tls-cert")
    api.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                     help="a scheduler's /metrics (`scheduler run --metrics-port`), read by the console (repeatable)")
    api.add_argument("--forecast-hours", type=float, default=6.0, help="hours ahead the console's forecast covers")
    api.set_defaults(handler=_guarded(api_serve))
    api_verbs = api.add_subparsers(dest="verb")
    keys = api_verbs.add_parser("keys", help="create, list or revoke API keys")
    key_verbs = keys.add_subparsers(dest="key_verb", required=True)
    kcreate = _add(key_verbs, "create", api_keys_create, "create an API key (printed once)")
    kcreate.add_argument("--tenant")
    kcreate.add_argument("--admin", action="store_true")
    kcreate.add_argument("--keys", type=Path, help=KEYS_HELP)
    klist = _add(key_verbs, "list", api_keys_list, "list API keys: ids and tenants")
    klist.add_argument("--keys", type=Path, help=KEYS_HELP)
    krevoke = _add(key_verbs, "revoke", api_keys_revoke, "revoke an API key by its id")
    krevoke.add_argument("key_id")
    krevoke.add_argument("--keys", type=Path, help=KEYS_HELP)
