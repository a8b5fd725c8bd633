"""`scheduler tenants ...`: register tenants, set their quotas, grant their workers broker ACLs."""
from __future__ import annotations

import argparse
import os
from enum import Enum

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AclBinding

from scheduler.cli_support import add_renamed
from scheduler.control.acls import grant_worker
from scheduler.control.cli_common import Record, add, client_log, emit, output_arg
from scheduler.control.client import SchedulerError, Unavailable, ValidationError
from scheduler.control.tenants import QUOTA_DEFAULTS, TenantRegistry, validate_tenant_name
from scheduler.kafka.views import ScheduleView
from scheduler.wire.topology import Topology

PER_SECOND = "_per_s"


def _quota_args(parser: argparse.ArgumentParser) -> None:
    """A flag per quota field; rates per second are named as `scheduler run` names them (`--trigger-rate`),
    their field names (`--trigger-rate-per-s`) kept as deprecated aliases."""
    for name, default in QUOTA_DEFAULTS.items():
        flag = f"--{name.replace('_', '-')}"
        if name.endswith(PER_SECOND):
            add_renamed(parser, flag.removesuffix("-per-s"), flag, name, type(default), type(default),
                        f"occurrences per second (default {default})", str(default), metavar="RATE")
        else:
            parser.add_argument(flag, dest=name, type=type(default), help=f"(default {default})")


def _quotas(args: argparse.Namespace) -> Record:
    return {name: getattr(args, name) for name in QUOTA_DEFAULTS if getattr(args, name) is not None}


def _registry(args: argparse.Namespace) -> TenantRegistry:
    return TenantRegistry(args.bootstrap, args.prefix, args.timeout, client_log(args))


def _tenant_text(t: Record) -> str:
    return f"{t['tenant']}  " + "  ".join(f"{name}={t[name]:g}" for name in QUOTA_DEFAULTS)


def tenants_register(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return emit(args, registry.register(args.name, **_quotas(args)), _tenant_text)


def tenants_get(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return emit(args, registry.get(args.name), _tenant_text)


def tenants_list(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return emit(args, registry.list(), lambda ts: "\n".join(map(_tenant_text, ts)) or "(no tenants)")


def tenants_set_quota(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return emit(args, registry.set_quota(args.name, **_quotas(args)), _tenant_text)


def tenants_delete(args: argparse.Namespace) -> int:
    with (_registry(args) as registry,
          ScheduleView(args.bootstrap, args.prefix, client_config=client_log(args)) as schedules):
        registry.delete(args.name, schedules, force=args.force)
    return emit(args, {"tenant": args.name, "deleted": True}, lambda d: f"deleted tenant {d['tenant']}")


def tenants_grant_worker(args: argparse.Namespace) -> int:
    """The password comes from the environment, so it shows neither in `ps` nor in shell history."""
    validate_tenant_name(args.name)
    password = os.environ.get(args.password_env, "")
    if not password:
        raise ValidationError("USAGE", f"${args.password_env} is empty or not set: put the worker's password there")
    try:
        admin_conf = {"bootstrap.servers": args.bootstrap, **client_log(args)}
        bindings = grant_worker(admin_conf, Topology.load(), args.prefix, args.name, args.user, password, args.timeout)
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
    return emit(args, granted, _grant_text)


def _acl_json(binding: AclBinding) -> Record:
    return {"resource_type": _symbol(binding.restype), "name": binding.name,
            "pattern": _symbol(binding.resource_pattern_type), "operation": _symbol(binding.operation)}


def _symbol(value: Enum | str | int) -> str:
    """An ACL binding's enum field by name (the client's stub also allows the str or int it was made from)."""
    return value.name if isinstance(value, Enum) else str(value)


def _grant_text(granted: Record) -> str:
    acls = (f"  {a['operation']} {a['resource_type']} {a['name']} ({a['pattern']})" for a in granted["acls"])
    return f"User:{granted['user']} may now run workers of {granted['tenant']}:\n" + "\n".join(acls)


def register(subparsers: argparse._SubParsersAction) -> None:
    tenants = subparsers.add_parser("tenants",
                                    help="register tenants, set their quotas, grant their workers broker ACLs")
    tverbs = tenants.add_subparsers(dest="verb", required=True)
    reg = add(tverbs, "register", tenants_register, "register a tenant: topics and quotas")
    reg.add_argument("name")
    _quota_args(reg)
    tget = add(tverbs, "get", tenants_get, "show a tenant's quotas")
    tget.add_argument("name")
    output_arg(add(tverbs, "list", tenants_list, "list tenants"))
    quota = add(tverbs, "set-quota", tenants_set_quota, "change some of a tenant's quotas")
    quota.add_argument("name")
    _quota_args(quota)
    delete = add(tverbs, "delete", tenants_delete, "delete a tenant (refused while it has live schedules)")
    delete.add_argument("name")
    delete.add_argument("--force", action="store_true", help="delete even with active or paused schedules")
    grant = add(tverbs, "grant-worker", tenants_grant_worker,
                 "create a SCRAM-SHA-512 user and the broker ACLs a worker of the tenant needs")
    grant.add_argument("name")
    grant.add_argument("--user", required=True, help="SCRAM user name (principal User:NAME)")
    grant.add_argument("--password-env", required=True, metavar="VAR",
                       help="environment variable holding the user's password")
