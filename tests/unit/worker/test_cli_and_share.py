"""Handler import paths, the CLI's options, and share-group acknowledgements."""
from __future__ import annotations

import pytest
from confluent_kafka import AcknowledgeType

from scheduler.cli import build_parser
from scheduler.worker.cli import load_handler
from scheduler.worker.share import acknowledgement


def test_load_handler_resolves_module_and_attribute_paths():
    assert load_handler("os.path:join")("a", "b") == "a/b"
    assert load_handler("scheduler.worker.cli:load_handler") is load_handler
    for bad in ("os.path", ":join", "os.path:"):
        with pytest.raises(ValueError):
            load_handler(bad)
    with pytest.raises(TypeError):
        load_handler("os:sep")


def test_worker_command_parses_its_options():
    args = build_parser().parse_args(["worker", "--tenant", "acme", "--handler", "m:f", "--share",
                                      "--priority", "high", "--priority", "low"])
    assert (args.tenant, args.handler_path, args.share, args.priorities) == ("acme", "m:f", True, ["high", "low"])
    assert callable(args.handler)


@pytest.mark.parametrize(("kind", "retryable", "ack"), [
    ("SUCCEEDED", False, AcknowledgeType.ACCEPT),
    ("SKIPPED_STALE", False, AcknowledgeType.ACCEPT),
    ("FAILED", True, AcknowledgeType.ACCEPT),
    ("FAILED", False, AcknowledgeType.REJECT),
])
def test_share_acknowledgement_follows_the_recorded_outcome(kind, retryable, ack):
    assert acknowledgement({"kind": kind, "retryable": retryable}) == ack
