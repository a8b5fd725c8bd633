"""`scheduler schedules|tenants|occurrences|api`: the control plane from a terminal or a script.

Human output by default, `--json` for scripts (one JSON document on stdout;
errors as {"code", "message"}). Values, `--tenant`'s default ($SCHEDULER_TENANT) and the
exit codes scripts can rely on are the grammar of docs/cli.md: 0 ok, 2 usage or validation
error, 3 not found, 4 conflict (version, state, exists), 5 quota or refused, 6 timeout or
unavailable, 1 anything else; `schedules import` exits 1 when some of its lines were
rejected (the others were imported).
"""
from __future__ import annotations

import argparse

from scheduler.control import api_cli, tenant_cli
from scheduler.control.occurrence_cli import register_occurrences
from scheduler.control.schedule_cli import register_schedules


def register(subparsers: argparse._SubParsersAction) -> None:
    """In the order `scheduler --help` has always listed them."""
    register_schedules(subparsers, __doc__ or "")
    tenant_cli.register(subparsers)
    register_occurrences(subparsers)
    api_cli.register(subparsers)
