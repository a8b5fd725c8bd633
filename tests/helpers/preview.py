"""`scheduler preview` (the alias of `schedules preview`) run in-process, as the CLI tests of the time core call it."""
from __future__ import annotations

import argparse

from scheduler.control import preview_cli


def run_preview(argv: list[str], capsys) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `scheduler preview ARGV`."""
    parser = argparse.ArgumentParser(prog="scheduler")
    preview_cli.register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["preview", *argv])
    code = args.handler(args)
    out, err = capsys.readouterr()
    return code, out, err
