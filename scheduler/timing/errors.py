"""The one error type of the timing package, so callers can report the bad field to users."""
from __future__ import annotations


class SpecError(ValueError):
    """A schedule spec is invalid; `field` names the offending input (e.g. "expression", "time_zone")."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
