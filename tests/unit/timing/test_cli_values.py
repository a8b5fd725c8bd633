"""The command line's grammar for durations and instants (scheduler/timing/cli_values.py, docs/cli.md)."""
from __future__ import annotations

import argparse
from datetime import datetime

import pytest

from scheduler.timing.cli_values import (
    MAX_MS,
    LocalTime,
    duration_type,
    instant_type,
    parse_duration_ms,
    parse_instant_ms,
    resolve_instants,
)


@pytest.mark.parametrize("text, ms", [
    ("500ms", 500), ("90s", 90_000), ("5m", 300_000), ("1h", 3_600_000), ("1d", 86_400_000),
    ("1h30m", 5_400_000), ("1.5s", 1_500), ("0s", 0), (" 2M ", 120_000), ("1d2h3m4s5ms", 93_784_005),
])
def test_durations_in_every_unit(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "5", "5 m", "-5m", "5x", "m", "1.5ms", "5m-", "1e3s", "PT5M", "five m"])
def test_bad_durations_are_refused_with_the_forms(text):
    with pytest.raises(ValueError, match="duration|milliseconds"):
        parse_duration_ms(text)


def test_a_duration_past_the_wires_long_is_refused():
    assert parse_duration_ms(f"{MAX_MS}ms") == MAX_MS
    with pytest.raises(ValueError, match="too long"):
        parse_duration_ms(f"{MAX_MS + 1}ms")
    with pytest.raises(ValueError, match="too long"):
        parse_duration_ms("999999999999999d")


def test_a_bare_number_keeps_the_old_unit_of_a_flag_that_had_one():
    seconds = duration_type("s", bare_unit="s")
    assert seconds("30") == 30.0 and seconds("0.5") == 0.5 and seconds("2m") == 120.0
    assert seconds(".5") == 0.5 and seconds("5.") == 5.0 and seconds(".5m") == 30.0
    assert duration_type("h")("90m") == 1.5
    assert duration_type("ms", bare_unit="ms")("250") == 250


def test_the_argparse_type_makes_a_usage_error(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--lease", type=duration_type())
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--lease", "30"])
    assert exit_.value.code == 2
    assert "argument --lease: not a duration: '30' (give 500ms|90s|5m|1h|1d" in capsys.readouterr().err


@pytest.mark.parametrize("text, ms", [
    ("2026-05-04T09:00:00Z", 1_777_885_200_000), ("2026-05-04T11:00:00+02:00", 1_777_885_200_000),
    ("2026-05-04t09:00z", 1_777_885_200_000), ("2026-05-04T09:00:00.250Z", 1_777_885_200_250),
    ("1777885200000", 1_777_885_200_000), ("0", 0), ("-1000", -1000),
])
def test_instants_with_an_offset_or_in_epoch_ms_need_no_zone(text, ms):
    assert parse_instant_ms(text) == ms and instant_type(text) == ms


def test_a_local_time_is_read_in_the_zone_and_refused_without_one():
    assert parse_instant_ms("2026-05-04T11:00", "Europe/Berlin") == 1_777_885_200_000
    assert parse_instant_ms("2026-05-04 09:00:00", "UTC") == 1_777_885_200_000
    assert instant_type("2026-05-04T11:00") == LocalTime("2026-05-04T11:00", datetime(2026, 5, 4, 11, 0))
    with pytest.raises(ValueError, match="no offset: add one .*or give --tz"):
        parse_instant_ms("2026-05-04T11:00")
    with pytest.raises(ValueError, match="unknown IANA time zone 'Mars/Base'"):
        parse_instant_ms("2026-05-04T11:00", "Mars/Base")


def test_a_local_time_in_a_dst_gap_is_refused():
    with pytest.raises(ValueError, match=r"2026-03-08T02:30 does not exist in America/New_York .*DST gap"):
        parse_instant_ms("2026-03-08T02:30", "America/New_York")
    assert parse_instant_ms("2026-03-08T03:30", "America/New_York") == parse_instant_ms("2026-03-08T07:30Z")


def test_a_local_time_in_a_dst_overlap_is_refused_naming_both_offsets():
    with pytest.raises(ValueError, match=r"happens twice .* 2026-11-01T01:30:00-04:00 or 2026-11-01T01:30:00-05:00"):
        parse_instant_ms("2026-11-01T01:30", "America/New_York")
    assert parse_instant_ms("2026-11-01T01:30-05:00") == parse_instant_ms("2026-11-01T06:30Z")
    assert parse_instant_ms("2026-11-01T00:30", "America/New_York") == parse_instant_ms("2026-11-01T04:30Z")


@pytest.mark.parametrize("text", ["yesterday", "2026-05-04", "2026-13-01T00:00Z", "2026-05-04T25:00Z", "1e12",
                                  "9" * 30])
def test_bad_instants_are_refused(text):
    with pytest.raises(argparse.ArgumentTypeError, match="instant|out of range"):
        instant_type(text)


def test_resolve_instants_replaces_only_local_times():
    args = argparse.Namespace(start=instant_type("2026-05-04T11:00"), end=5, name="x")
    resolve_instants(args, "Europe/Berlin")
    assert vars(args) == {"start": 1_777_885_200_000, "end": 5, "name": "x"}
