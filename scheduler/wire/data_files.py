"""Where the repository's data directories (`schemas/`, `topologies/`) are, in a checkout and in a wheel.

A source checkout or an editable install has them beside the package. A regular install has no
repository: pyproject's `[tool.setuptools.data-files]` ships them to `<prefix>/share/kafka-job-scheduler/`.
"""
from __future__ import annotations

import sys
from pathlib import Path

SHARE_DIR = Path("share") / "kafka-job-scheduler"  # under sys.prefix; pyproject's data-files targets


def data_dir(name: str) -> Path:
    """The directory `name` (e.g. "schemas"): the repository's beside the package if there is one, else the
    installed copy under `<prefix>/share/kafka-job-scheduler`."""
    beside = Path(__file__).resolve().parents[2] / name
    if beside.is_dir():
        return beside
    return Path(sys.prefix) / SHARE_DIR / name
