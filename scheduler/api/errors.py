"""How the HTTP API answers a failure: one JSON body `{code, message}` for every kind of error, and
the status a client library can branch on (the reason codes of the command results mapped to HTTP)."""
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from scheduler.api.models import Error
from scheduler.control.errors import (
    CommandTimeout,
    Conflict,
    NotFound,
    QuotaExceeded,
    SchedulerError,
    Unavailable,
    ValidationError,
    VersionConflict,
)
from scheduler.kafka.views import ViewUnavailable

# Most specific first: VersionConflict is a Conflict, CommandTimeout is Unavailable.
STATUS_BY_ERROR: tuple[tuple[type[SchedulerError], int], ...] = (
    (ValidationError, 422), (NotFound, 404), (VersionConflict, 412), (Conflict, 409),
    (QuotaExceeded, 429), (CommandTimeout, 504), (Unavailable, 503),
)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": Error} for status in (401, 404, 409, 412, 422, 429, 503, 504)
}


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


def not_found(what: str) -> ApiError:
    return ApiError(404, "NOT_FOUND", f"{what} not found")


def status_of(exc: SchedulerError) -> int:
    for kind, status in STATUS_BY_ERROR:
        if isinstance(exc, kind):
            return status
    return 502  # a reason code this server does not know: the engine is newer


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"code": code, "message": message}, status_code=status)


def add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.code, exc.message)

    @app.exception_handler(SchedulerError)
    def _scheduler_error(_: Request, exc: SchedulerError) -> JSONResponse:
        return _error(status_of(exc), exc.reason, exc.message)

    @app.exception_handler(ViewUnavailable)
    def _view_unavailable(_: Request, exc: ViewUnavailable) -> JSONResponse:
        return _error(503, "UNAVAILABLE", str(exc))

    @app.exception_handler(RequestValidationError)
    def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:5])
        return _error(422, "INVALID_REQUEST", details or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, "NOT_FOUND" if exc.status_code == 404 else "HTTP_ERROR", str(exc.detail))

    @app.exception_handler(UnicodeError)
    def _unicode(_: Request, exc: UnicodeError) -> JSONResponse:
        return _error(422, "INVALID_REQUEST", f"text is not valid Unicode: {exc}")
