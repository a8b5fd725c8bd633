"""`scheduler reconcile` run as an operator would, for the reconcile tests and issue 14's acceptance run."""
from __future__ import annotations

import os
import subprocess
import sys

from engine_harness import REPO, rfc3339

TENANT = "audit"


def reconcile(url: str | None, prefix: str, *args: str) -> subprocess.CompletedProcess:
    """`url`: the ledger's database (AUDIT_DATABASE_URL); None runs without one, as a misconfigured call would."""
    env = {**os.environ, "SCHEDULER_TOPIC_PREFIX": prefix}
    env.pop("AUDIT_DATABASE_URL", None)
    if url is not None:
        env["AUDIT_DATABASE_URL"] = url
    return subprocess.run([sys.executable, "-m", "scheduler", "reconcile", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def window(from_ms: int, to_ms: int) -> list[str]:
    """The arguments that reconcile TENANT from `from_ms` to `to_ms`."""
    return ["--tenant", TENANT, "--from", rfc3339(from_ms), "--to", rfc3339(to_ms)]
