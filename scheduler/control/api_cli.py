"""`scheduler api` serves the HTTP API; `scheduler api keys ...` manages its API keys."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from scheduler.api.keys import create_key, list_keys, revoke_key
from scheduler.cli_support import add_renamed
from scheduler.control.cli_common import EXIT_OK, add, client_config, client_log, common_args, emit, guarded, output_arg
from scheduler.control.client import NotFound, ValidationError
from scheduler.timing.cli_values import duration_type

if TYPE_CHECKING:
    from scheduler.api.shared_keys import SharedKeyStore

KEYS_HELP = ("API key file, for a single server (default: the keys shared by every server, in the "
             "compacted <prefix>.api-keys topic)")


def api_serve(args: argparse.Namespace) -> int:
    from scheduler.api.server import serve  # uvicorn and FastAPI load only for the server

    if (args.tls_cert is None) != (args.tls_key is None):
        raise ValidationError("USAGE", "give both --tls-cert and --tls-key, or neither")
    serve(args.bootstrap, args.prefix, args.host, args.port, args.keys, args.timeout, args.tls_cert, args.tls_key,
          args.metrics_url, args.forecast_hours, client_config(args))
    return EXIT_OK


def _shared_keys(args: argparse.Namespace) -> SharedKeyStore:
    from scheduler.api.shared_keys import SharedKeyStore

    return SharedKeyStore(args.bootstrap, args.prefix, args.timeout, client_log(args))


def api_keys_create(args: argparse.Namespace) -> int:
    if (args.tenant is None) == (not args.admin):
        raise ValidationError("USAGE", "give exactly one of --tenant T and --admin")
    tenant = None if args.admin else args.tenant
    if args.keys is not None:
        key, where = create_key(args.keys, tenant), str(args.keys)
    else:
        with _shared_keys(args) as store:
            key, where = store.create(tenant), store.topic
    return emit(args, {"key": key, "tenant": args.tenant, "admin": args.admin},
                 lambda d: f"{d['key']}\n(shown once; only its hash is stored in {where})")


def api_keys_list(args: argparse.Namespace) -> int:
    if args.keys is not None:
        found = list_keys(args.keys)
    else:
        with _shared_keys(args) as store:
            found = store.list()
    return emit(args, found, lambda d: "\n".join(f"{k['key_id']}  {k['tenant'] or '(admin)'}" for k in d))


def api_keys_revoke(args: argparse.Namespace) -> int:
    if args.keys is not None:
        if not revoke_key(args.keys, args.key_id):
            raise NotFound("UNKNOWN_KEY", f"no key {args.key_id!r} in {args.keys}")
    else:
        with _shared_keys(args) as store:
            store.revoke(args.key_id)
    return emit(args, {"revoked": args.key_id}, lambda d: f"revoked {d['revoked']}")


def register(subparsers: argparse._SubParsersAction) -> None:
    api = subparsers.add_parser("api", help="serve the HTTP API; `api keys` manages API keys")
    common_args(api)
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8080)
    api.add_argument("--keys", type=Path, help=KEYS_HELP)
    api.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve HTTPS with this certificate (chain)")
    api.add_argument("--tls-key", type=Path, metavar="PEM", help="the private key of --tls-cert")
    api.add_argument("--metrics-url", action="append", default=[], metavar="URL",
                     help="a scheduler's /metrics (`scheduler run --metrics-port`), read by the console (repeatable)")
    add_renamed(api, "--forecast", "--forecast-hours", "forecast_hours", duration_type("h"), float,
                "how far ahead the console's forecast covers: a duration (default 6h)", "6h", default=6.0)
    api.set_defaults(handler=guarded(api_serve))
    api_verbs = api.add_subparsers(dest="verb")
    keys = api_verbs.add_parser("keys", help="create, list or revoke API keys")
    key_verbs = keys.add_subparsers(dest="key_verb", required=True)
    kcreate = add(key_verbs, "create", api_keys_create, "create an API key (printed once)")
    kcreate.add_argument("--tenant")
    kcreate.add_argument("--admin", action="store_true")
    kcreate.add_argument("--keys", type=Path, help=KEYS_HELP)
    klist = add(key_verbs, "list", api_keys_list, "list API keys: ids and tenants")
    klist.add_argument("--keys", type=Path, help=KEYS_HELP)
    output_arg(klist)
    krevoke = add(key_verbs, "revoke", api_keys_revoke, "revoke an API key by its id")
    krevoke.add_argument("key_id")
    krevoke.add_argument("--keys", type=Path, help=KEYS_HELP)
