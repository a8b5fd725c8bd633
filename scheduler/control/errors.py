"""What the control plane raises: a command the scheduler rejected, or could not answer; `reason` is its code."""
from __future__ import annotations

from typing import Any


class SchedulerError(Exception):
    """A command the scheduler rejected (or could not answer); `reason` is its reason code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class ValidationError(SchedulerError):
    """The request is invalid (spec, zone, names, ranges); found locally or by the engine."""


class NotFound(SchedulerError):
    """No such schedule or occurrence for this tenant (another tenant's is not found either)."""


class Conflict(SchedulerError):
    """The schedule's state forbids the change (it exists already, it is canceled, ...)."""


class VersionConflict(Conflict):
    """expected_version is not the schedule's current version."""


class QuotaExceeded(SchedulerError):
    """A tenant quota (e.g. max_active_schedules) refused the command."""


class Unavailable(SchedulerError):
    """The scheduler's topics are missing or the cluster cannot be reached."""


class CommandTimeout(Unavailable):
    def __init__(self, command_id: str) -> None:
        super().__init__("TIMEOUT", f"no result for command {command_id} in time")


ERRORS_BY_REASON: dict[str, type[SchedulerError]] = {
    "INVALID_SPEC": ValidationError,
    "UNKNOWN_ZONE": ValidationError,
    "MALFORMED_RECORD": ValidationError,
    "UNKNOWN_SCHEDULE": NotFound,
    "UNKNOWN_OCCURRENCE": NotFound,
    "UNKNOWN_TENANT": NotFound,
    "VERSION_CONFLICT": VersionConflict,
    "ALREADY_EXISTS": Conflict,
    "INVALID_STATE": Conflict,
    "QUOTA": QuotaExceeded,
}


def error_for(reason: str, message: str) -> SchedulerError:
    """The typed error of a rejection reason; unknown reasons stay a plain SchedulerError."""
    return ERRORS_BY_REASON.get(reason, SchedulerError)(reason, message)


def accepted(result: dict[str, Any]) -> dict[str, Any]:
    """A command's result when ACCEPTED; else its rejection raised as the reason's typed error."""
    if result["status"] != "ACCEPTED":
        raise error_for(result["reason"] or "UNKNOWN", result["message"] or "")
    return result
