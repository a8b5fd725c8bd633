"""The conventions the subcommands share: what goes to stdout (for scripts) and to stderr (for people),
and the status exit codes."""
import pytest

from scheduler.cli_support import EXIT_NOT_RUNNING, external_instead, print_ensure_rows, print_status


def test_status_prints_one_line_and_exits_3_when_stopped(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    assert print_status(None, tmp_path) == EXIT_NOT_RUNNING == 3
    assert capsys.readouterr().out == f"stopped (data dir {tmp_path})\n"
    assert print_status("pid=7 url=http://x", tmp_path) == 0
    assert capsys.readouterr().out == "running pid=7 url=http://x\n"


def test_an_external_service_is_printed_on_stdout_and_explained_on_stderr(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KJS_TEST_URL", raising=False)
    assert not external_instead("KJS_TEST_URL", "using {}")
    assert capsys.readouterr() == ("", "")
    monkeypatch.setenv("KJS_TEST_URL", "http://elsewhere:8083")
    assert external_instead("KJS_TEST_URL", "using the worker at {}; none started")
    out, err = capsys.readouterr()
    assert out == "http://elsewhere:8083\n"
    assert err == "KJS_TEST_URL is set: using the worker at http://elsewhere:8083; none started\n"


def test_ensure_rows_keep_their_columns_whatever_the_noun(capsys: pytest.CaptureFixture[str]) -> None:
    print_ensure_rows(["a"], ["b"], ["c: partitions 3, want 8"], "table ")
    print_ensure_rows(["t1"], [], [])
    assert capsys.readouterr().out.splitlines() == [
        "created  table a", "ok       table b", "DIFFERS  table c: partitions 3, want 8", "created  t1"]
