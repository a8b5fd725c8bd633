"""The client refuses a spec that never fires (the search horizon, scheduler/timing/horizon.py) before
sending it, with the engine's reason, and within a second; a stored spec's preview still answers."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings

from pathological_specs import NEVER_FIRING, NOW_MS, never_fires, spring_forward_specs
from scheduler.control.client import ValidationError, make_spec, preview
from scheduler.control.command_record import create_record
from scheduler.control.specs import validate_spec


@pytest.mark.parametrize("kind", sorted(NEVER_FIRING))
def test_the_client_refuses_a_never_firing_spec_before_sending_it(kind):
    started = time.monotonic()
    with pytest.raises(ValidationError) as refused:
        create_record("acme", "s1", NEVER_FIRING[kind], None)
    assert time.monotonic() - started < 1.0
    assert refused.value.reason == "INVALID_SPEC" and refused.value.message.startswith("expression: no fire")


def test_a_never_firing_spec_previews_as_nothing_at_once():
    started = time.monotonic()
    assert preview(NEVER_FIRING["cron"], 10, NOW_MS) == []
    assert time.monotonic() - started < 1.0


def test_validation_counts_from_the_instant_given():
    ended = make_spec("rrule", "DTSTART:20260105T090000 RRULE:FREQ=WEEKLY;UNTIL=20260301", "Europe/Dublin")
    validate_spec(ended, NOW_MS - 365 * 86_400_000)
    with pytest.raises(ValidationError, match="no fire in the next 50 years"):
        validate_spec(ended, NOW_MS)


@given(spec=spring_forward_specs())
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_fuzz_the_client_refuses_exactly_the_specs_that_never_fire_each_within_a_second(spec):
    started = time.monotonic()
    try:
        validate_spec(spec, NOW_MS)
        refused = None
    except ValidationError as exc:
        refused = exc
    assert time.monotonic() - started < 1.0
    if never_fires(spec):
        assert refused is not None and refused.reason == "INVALID_SPEC" and "no fire" in refused.message, spec
    else:
        assert refused is None, (spec, refused)
