# The two README commands are `make demo` (run the system locally) and `make test` (the whole suite).
# Everything they need is installed here: a virtualenv with the package, Kafka jars on first broker start.

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install system-deps converter-test lint test broker-start broker-stop demo

install: $(STAMP)

# Debian packages of the real components the suite and the demo start (system-packages.txt).
system-deps:
	@scripts/install-system-packages.sh

# Re-installs only when the dependency list changes, so repeated runs cost nothing.
$(STAMP): pyproject.toml
	@python=$$(command -v python3.11 || command -v python3) || { echo "error: Python 3.11 or newer is needed (install python3.11)" >&2; exit 2; }; \
	"$$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "error: $$python is older than 3.11; install python3.11" >&2; exit 2; }; \
	test -x $(PY) || "$$python" -m venv $(VENV)
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $@

# The Java Converter of the audit ledger's Connect sinks: its JUnit tests (Maven Surefire) decode a
# record of every schema in schemas/ and schemas/history/.
converter-test: install system-deps
	$(PY) -m scheduler.connect.artifacts --test

# mypy (strict for timing/, wire/, engine/) and ruff, configured in pyproject.toml; both keep caches
# (.mypy_cache, .ruff_cache), so a repeated run takes a few seconds. The generated record types are
# checked up to date by tests/unit/wire/test_typegen.py.
lint: install
	$(VENV)/bin/mypy
	$(VENV)/bin/ruff check

# pytest exit code 5 ("no tests collected") counts as a failure: an empty run proves nothing.
test: install system-deps lint converter-test
	@$(PY) -m pytest; status=$$?; \
	if [ $$status -eq 5 ]; then echo "error: pytest collected no tests" >&2; exit 1; fi; \
	exit $$status

broker-start: install
	$(PY) -m scheduler broker start

broker-stop: install
	$(PY) -m scheduler broker stop

demo: install system-deps
	$(PY) -m scheduler demo
