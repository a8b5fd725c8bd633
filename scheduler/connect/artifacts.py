"""What the Connect worker runs, fetched or built by Maven once per machine into the cache.

- the worker: Apache Kafka's connect-runtime + transforms, the broker's version (worker-pom.xml);
- the Debezium JDBC sink as a plugin directory (jdbc-sink-pom.xml);
- our Converter (converter/, Java), built with the self-contained schemas of schemas/ and
  schemas/history/ bundled in, and cached by a digest of its sources and those schemas.

Each plugin is laid out as `<cache>/connect-plugins/<name>/<name>/*.jar`, so every `plugin.path`
entry holds exactly one plugin directory and no cache bookkeeping files."""
from __future__ import annotations

import hashlib
import json
import shutil
import sys
from importlib import resources
from pathlib import Path

from scheduler import config
from scheduler.broker.jvm_process import KAFKA_VERSION
from scheduler.dev.maven_cache import MavenError, cached_build, copy_dependencies, run_maven
from scheduler.wire.schemas import load_current, load_history, schema_dir

CONVERTER_CLASS = "scheduler.connect.SingleObjectAvroConverter"
JDBC_SINK_CLASS = "io.debezium.connector.jdbc.JdbcSinkConnector"
_PACKAGE = resources.files(__package__)


def connect_home() -> Path:
    return config.cache_dir() / f"connect-{KAFKA_VERSION}"


def plugins_home() -> Path:
    return config.cache_dir() / "connect-plugins"


def ensure_worker_jars() -> Path:
    return copy_dependencies(connect_home(), "libs", (_PACKAGE / "worker-pom.xml").read_bytes(),
                             f"the Kafka Connect {KAFKA_VERSION} worker jars")


def ensure_jdbc_plugin() -> Path:
    pom = (_PACKAGE / "jdbc-sink-pom.xml").read_bytes()

    def build(staging: Path) -> None:
        pom_file = plugins_home() / "jdbc-sink-pom.xml"
        pom_file.write_bytes(pom)
        run_maven(["-q", "-f", str(pom_file), "dependency:copy-dependencies",
                   f"-DoutputDirectory={staging / 'debezium-jdbc'}"], plugins_home(), "fetch Debezium's JDBC sink")

    return cached_build(plugins_home(), "debezium-jdbc", hashlib.sha256(pom).hexdigest(), build)


def converter_source() -> Path:
    return Path(str(_PACKAGE / "converter"))


def stage_schemas(target: Path) -> list[str]:
    """Write every record schema, current and historical, self-contained, plus index.txt.

    Self-contained (named types inlined) because that is the form the fingerprint is defined on;
    the index carries the Python codec's fingerprint so the Java tests can check they agree."""
    directory = schema_dir()
    lines: list[str] = []
    (target / "history").mkdir(parents=True, exist_ok=True)
    for version in load_current(directory).values():
        lines.append(_write(target, f"{version.short_name}.avsc", version.schema_json, version.fingerprint))
    for version in load_history(directory):
        if version.schema.get("type") == "record":
            name = f"history/{version.short_name}.{version.fingerprint.hex()}.avsc"
            lines.append(_write(target, name, version.schema_json, version.fingerprint))
    (target / "index.txt").write_text("".join(f"{line}\n" for line in lines))
    return lines


def _write(target: Path, name: str, text: str, fingerprint: bytes) -> str:
    (target / name).write_text(text)
    return f"{name}\t{fingerprint.hex()}"


def _converter_digest() -> str:
    digest = hashlib.sha256()
    source = converter_source()
    for path in sorted(p for p in source.rglob("*") if p.is_file() and "target" not in p.parts):
        digest.update(str(path.relative_to(source)).encode() + b"\0" + path.read_bytes())
    directory = schema_dir()
    for path in sorted([*directory.glob("*.avsc"), *directory.glob("history/*.avsc")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _maven_build(work: Path, goals: list[str]) -> str:
    """Copy the converter project to `work`, stage the schemas, run Maven there (never in the package)."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(converter_source(), work, ignore=shutil.ignore_patterns("target"))
    stage_schemas(work / "staged-schemas")
    return run_maven([*goals, f"-Dschemas.dir={work / 'staged-schemas'}"], work, "build the Connect converter")


def ensure_converter_plugin() -> Path:
    """The converter jar and Avro in one plugin directory; its JUnit tests run in `make test`, not here."""

    def build(staging: Path) -> None:
        work = plugins_home() / "converter-build"
        plugin = staging / "scheduler-converter"
        _maven_build(work, ["-q", "-DskipTests", "package", "dependency:copy-dependencies",
                            f"-DoutputDirectory={plugin}"])
        shutil.copy2(work / "target" / "scheduler-connect-converter-1.0.0.jar", plugin)
        shutil.rmtree(work, ignore_errors=True)

    return cached_build(plugins_home(), "converter", _converter_digest(), build)


def ensure_plugins() -> list[Path]:
    """The `plugin.path` entries: our converter and Debezium's JDBC sink."""
    return [ensure_converter_plugin(), ensure_jdbc_plugin()]


def run_converter_tests() -> int:
    """`mvn test` for the converter, Surefire's report on stdout (make test runs this)."""
    work = plugins_home() / "converter-test"
    try:
        output = _maven_build(work, ["test"])
    except MavenError as error:
        print(error, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(line for line in output.splitlines() if "Tests run" in line or "BUILD" in line))
    return 0


def describe() -> str:
    return json.dumps({"worker": str(ensure_worker_jars()), "plugins": [str(p) for p in ensure_plugins()]})


if __name__ == "__main__":
    sys.exit(run_converter_tests() if sys.argv[1:] == ["--test"] else print(describe()) or 0)
