"""Limits of the command contract that both the client and the engine keep."""
from __future__ import annotations

PREVIEW_COUNT = 5  # next fires in an ACCEPTED result, a preview, a dry run
MAX_BACKFILL = 1000  # fires one BACKFILL may replay; a larger range is rejected with INVALID_SPEC
MAX_NOTE_LENGTH = 1000  # characters of a PAUSE's note (kept on the schedule); a longer one: INVALID_SPEC
