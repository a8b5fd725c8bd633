"""The docs name only what exists. README.md, docs/**/*.md and bench/README.md (and the CLI's own help
texts) are read for repository paths, `scheduler ...` commands and their flags, and Prometheus metric
names, each checked against the code: the file system, the argparse tree of `scheduler.cli`, the engine's
metrics registry. A rename or removal that leaves a doc behind fails here, naming the doc line.

Rules (docs_mentions.py has the details):
- paths: tokens with a `/` whose first segment is a directory of the repository, of the doc's own
  directory or of the `scheduler` package; so `~/.cache/...`, `/dev/shm/...`, URLs and example names a
  user picks (`keys.json`, `client.properties`) are not checked. `<placeholder>`, `*` and `{a,b}` are
  patterns that must match at least one file.
- commands: inline code spans that begin with `scheduler `, and code block lines where `scheduler`
  begins a shell command; every subcommand word and every `--flag` must be in the parser.
- a code span that is one flag alone (`--stage-rate`) in README.md or docs/ must be a flag of some
  `scheduler` command (bench/README.md's lone flags are the bench scripts' own).
- metrics: any `scheduler_...` name, anywhere in the text, must be a sample name of `EngineMetrics`'
  registry or a `scheduler_...` string the package uses for something else (a table, a cookie).
Not checked: figures (measurements are history; bench/README.md dates them) and prose without backticks.
"""
from __future__ import annotations

import json
import re

import pytest
from docs_mentions import (
    DOCS,
    METRIC,
    REPO,
    all_flags,
    command_problems,
    doc_mentions,
    help_mentions,
    lone_flag,
    metric_names,
    path_problems,
)

from scheduler.wire import vocabulary

DASHBOARD = REPO / "docs" / "grafana" / "scheduler.json"


def doc_id(path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_paths_a_doc_names_exist(doc) -> None:
    problems = [f"{m.where}: {p}" for m in doc_mentions(doc) for p in path_problems(m.text, doc.parent)]
    assert problems == []


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_commands_and_flags_a_doc_names_exist(doc) -> None:
    problems = [f"{m.where}: `{m.text}`: {p}" for m in doc_mentions(doc) if m.command for p in command_problems(m.text)]
    assert problems == []


@pytest.mark.parametrize("doc", [d for d in DOCS if d != REPO / "bench" / "README.md"], ids=doc_id)
def test_a_flag_named_alone_is_a_flag_of_some_command(doc) -> None:
    flags = all_flags()
    problems = [f"{m.where}: {flag}" for m in doc_mentions(doc) if (flag := lone_flag(m)) and flag not in flags]
    assert problems == []


@pytest.mark.parametrize("doc", DOCS, ids=doc_id)
def test_metric_names_a_doc_names_exist(doc) -> None:
    known = metric_names()
    problems = [f"{doc_id(doc)}:{number}: {name}"
                for number, line in enumerate(doc.read_text().splitlines(), 1)
                for name in METRIC.findall(line) if name not in known]
    assert problems == []


def test_the_grafana_dashboard_queries_existing_metrics() -> None:
    """The names only; tests/integration/test_prometheus_dashboard.py runs the queries on a real Prometheus."""
    exprs = [t["expr"] for p in json.loads(DASHBOARD.read_text())["panels"] for t in p.get("targets", [])]
    assert exprs
    known = metric_names()
    assert sorted({name for expr in exprs for name in METRIC.findall(expr)} - known) == []


def test_the_cli_help_names_existing_paths_and_commands() -> None:
    problems = [f"{m.where}: {p}" for m in help_mentions()
                for p in (command_problems(m.text) if m.command else path_problems(m.text, REPO))]
    assert problems == []


def test_the_readme_lists_every_reject_reason() -> None:
    """The README's list of reason codes is the contract's; UNKNOWN is only the schema's default for a
    reader older than a new symbol, never sent."""
    text = " ".join((REPO / "README.md").read_text().split())
    sentence = re.search(r"REJECTED with a reason code (.*?)\.\s+[A-Z]", text)
    assert sentence, "the README's sentence listing the reject reasons"
    listed = set(re.findall(r"`([A-Z][A-Z_]+)`", sentence.group(1)))
    assert listed == set(vocabulary.choices("RejectReason"))
