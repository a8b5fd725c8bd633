"""What the docs name, read out of their Markdown, and what exists, read out of the code: the helpers of
test_docs_references.py.

Mentions are taken from inline code spans, fenced code blocks and link targets (prose is not parsed,
except for metric names, whose `scheduler_` prefix is unambiguous). The truth is the argparse tree of
`scheduler.cli.build_parser()`, the metrics registry of `EngineMetrics` and the file system.
"""
from __future__ import annotations

import argparse
import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import product
from pathlib import Path

from prometheus_client import CollectorRegistry

from scheduler.api.health_routes import ApiMetrics
from scheduler.audit.reconcile_follow import ReconcileMetrics
from scheduler.cli import build_parser
from scheduler.engine.metrics import EngineMetrics
from scheduler.worker.metrics import WorkerMetrics

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "scheduler"
DOCS = sorted([REPO / "README.md", REPO / "bench" / "README.md", *(REPO / "docs").rglob("*.md")])

FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"(`+)(.+?)\1")
LINK = re.compile(r"\]\(([^)\s]+)\)")
# `scheduler` where a shell command begins: line start (after a `$ ` prompt and VAR=value assignments),
# `$(`, or after a pipe or `&&`.
COMMAND_START = re.compile(r"(?:^|\$\(|\|\s*|&&\s*)\s*(?:\$\s+)?(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?=scheduler\s)")
SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*(?:\|[a-z][a-z0-9-]*)*")
PATH_TOKEN = re.compile(r"[^\s`'\"()\[\];=|]+/[^\s`'\"()\[\];=|]*")
METRIC = re.compile(r"\bscheduler_[a-z0-9_]+\b")
SAMPLE_SUFFIXES = ("", "_total", "_created", "_bucket", "_sum", "_count")


@dataclass(frozen=True)
class Mention:
    """A piece of doc text that may name things: where it is, and whether it is a command line."""
    where: str
    text: str
    command: bool = False


def doc_mentions(doc: Path) -> Iterator[Mention]:
    """Inline code spans and link targets outside code blocks; code block lines, a command's continuation
    lines (a trailing backslash, or an indented line of `[--flags]`) joined to it, comments cut off."""
    block: list[tuple[int, str]] | None = None
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        where = f"{doc.relative_to(REPO)}:{number}"
        if FENCE.match(line):
            if block is not None:
                yield from _block_mentions(doc, block)
            block = None if block is not None else []
        elif block is not None:
            block.append((number, line))
        else:
            for match in INLINE.finditer(line):
                span = match.group(2).strip()
                yield Mention(where, span, command=span.startswith("scheduler "))
            for match in LINK.finditer(line):
                yield Mention(where, match.group(1))


def _block_mentions(doc: Path, lines: list[tuple[int, str]]) -> Iterator[Mention]:
    joined: list[tuple[int, str]] = []
    for number, line in lines:
        text = re.sub(r"(^|\s)#.*$", "", line).rstrip()
        continues = joined and (joined[-1][1].endswith("\\") or re.match(r"\s+(\[|--)", text))
        if continues:
            joined[-1] = (joined[-1][0], joined[-1][1].rstrip("\\") + " " + text.strip())
        else:
            joined.append((number, text))
    for number, text in joined:
        where = f"{doc.relative_to(REPO)}:{number}"
        yield Mention(where, text)
        start = COMMAND_START.search(text)
        if start:
            yield Mention(where, text[start.end():], command=True)


def help_mentions() -> Iterator[Mention]:
    """The CLI's own help texts are docs too: every description and every option's help."""
    for path, parser in cli_commands().items():
        texts = [parser.description or ""] + [action.help or "" for action in parser._actions]
        for text in texts:
            yield Mention(f"`scheduler {' '.join(path)} --help`", text)
            for match in INLINE.finditer(text):
                span = match.group(2).strip()
                yield Mention(f"`scheduler {' '.join(path)} --help`", span, command=span.startswith("scheduler "))


def cli_commands() -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command of `scheduler`, by its words (the top-level parser under ())."""
    found: dict[tuple[str, ...], argparse.ArgumentParser] = {}

    def walk(path: tuple[str, ...], parser: argparse.ArgumentParser) -> None:
        found[path] = parser
        for name, child in _subcommands(parser).items():
            walk(path + (name,), child)

    walk((), build_parser())
    return found


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {name: child for action in parser._actions if isinstance(action, argparse._SubParsersAction)
            for name, child in action.choices.items()}


LONE_FLAG = re.compile(r"(--[a-z][a-z0-9-]*)(?:[ =]\S+)?")


def lone_flag(mention: Mention) -> str | None:
    """The flag a code span consisting of one flag (`--stage-rate`, `--standbys N`) names, if it is one."""
    match = None if mention.command else LONE_FLAG.fullmatch(mention.text)
    return match.group(1) if match else None


def all_flags() -> set[str]:
    return {flag for parser in cli_commands().values() for flag in parser._option_string_actions}


def command_problems(text: str) -> list[str]:
    """What a `scheduler ...` command line names that the parser does not have. `a|b` names alternative
    subcommands; a `|` outside brackets starts an alternative to the last subcommand; a flag must belong to
    one of the commands in scope; a word is taken as a subcommand only where the command has subcommands
    and no positional nor flag value came first."""
    try:
        tokens = shlex.split(text)
    except ValueError:
        tokens = text.split()
    root = cli_commands()[()]
    problems: list[str] = []
    levels: list[list[tuple[str, argparse.ArgumentParser]]] = [[("scheduler", root)]]
    depth, expect_word, skip_value = 0, True, False
    for raw in tokens:
        token = raw.strip("[]()")
        scope = levels[-1]
        if raw == "scheduler":
            levels, depth, expect_word, skip_value = [[("scheduler", root)]], 0, True, False
        elif skip_value:
            skip_value = False
        elif token.startswith("--"):
            for flag in token.split("/"):
                actions = [p._option_string_actions.get(flag.split("=")[0]) for _, p in scope]
                known = [a for a in actions if a is not None]
                if not known:
                    problems.append(f"{' | '.join(name for name, _ in scope)} has no flag {flag.split('=')[0]}")
                skip_value = bool(known) and known[0].nargs != 0 and "=" not in flag
        elif raw == "|" and depth == 0 and len(levels) > 1:
            levels.pop()
            expect_word = True
        elif expect_word and depth == 0 and SUBCOMMAND.fullmatch(token) and any(_subcommands(p) for _, p in scope):
            children = []
            for word in token.split("|"):
                child = next((sub[word] for _, p in scope if word in (sub := _subcommands(p))), None)
                if child is None:
                    problems.append(f"{' | '.join(name for name, _ in scope)} has no subcommand {word}")
                else:
                    children.append((f"{scope[0][0]} {word}", child))
            if not children:
                break
            levels.append(children)
        elif len(levels) == 1:
            break  # `scheduler` then no command word: not a command line (e.g. a diagram's label)
        else:
            expect_word = False
        depth = max(0, depth + raw.count("[") + raw.count("(") - raw.count("]") - raw.count(")"))
    return problems


def path_problems(text: str, doc_dir: Path) -> list[str]:
    """Repository paths in `text` that do not exist. A token with a `/` is a repository path when its first
    segment is a directory of the repository, of the doc's directory or of the package (architecture.md's
    `engine/runtime.py`); `<placeholder>` and `*` match any name, `{a,b}` either; `.py` may be left off a
    module's path, and a module may be followed by `.attribute`. Absolute, home, URL and `./` paths are
    not the repository's."""
    bases = (REPO, doc_dir, PACKAGE)
    problems = []
    for match in PATH_TOKEN.finditer(text):
        token = match.group(0).rstrip(".,:;").rstrip("/")
        if "://" in token or token.startswith(("/", "~", "$", ".", "<")) or "/" not in token:
            continue
        first = token.split("/")[0]
        if not any((base / first).is_dir() for base in bases if re.fullmatch(r"[\w.-]+", first)):
            continue
        if not any(_exists(base, token) for base in bases):
            problems.append(f"no file {token}")
    return problems


def _exists(base: Path, token: str) -> bool:
    pattern = re.sub(r"<[^>]*>", "*", token)
    choices = [part.split(",") for part in re.findall(r"\{([^}]*)\}", pattern)]
    template = re.sub(r"\{[^}]*\}", "{}", pattern)
    for picked in product(*choices) if choices else [()]:
        path = template.format(*picked) if choices else pattern
        head, _, last = path.rpartition("/")
        module = f"{head}/{last.split('.')[0]}.py"
        if not any(any(base.glob(candidate)) for candidate in (path, path + ".py", module)):
            return False
    return True


def metric_names() -> set[str]:
    """Every sample name the engine's, the worker's, the online reconciler's and the API's registries expose, plus the `scheduler_*`
    string literals the package uses for other things (the idempotency table, the console's cookie), which
    are not metrics."""
    registry = CollectorRegistry()
    EngineMetrics(registry)
    WorkerMetrics(registry)
    ReconcileMetrics(registry)
    names = {family.name + suffix for r in (registry, ApiMetrics().registry) for family in r.collect()
             for suffix in SAMPLE_SUFFIXES}
    for source in PACKAGE.rglob("*.py"):
        if source == PACKAGE / "engine" / "metrics.py":
            continue
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and METRIC.fullmatch(node.value):
                names.add(node.value)
    return names
