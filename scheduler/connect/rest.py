"""A few calls of Kafka Connect's REST API (urllib: nothing to install for four verbs)."""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

TIMEOUT_S = 30.0


class ConnectRestError(Exception):
    """The worker answered with an error, or not at all; `status` is the HTTP code (0: no answer)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


class ConnectRest:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{self.url}{path}", data=data, method=method,
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as error:
            detail = error.read().decode(errors="replace")
            try:
                detail = json.loads(detail).get("message", detail)
            except (ValueError, AttributeError):
                pass
            raise ConnectRestError(f"{method} {self.url}{path}: HTTP {error.code}: {detail}", error.code) from None
        except (urllib.error.URLError, OSError) as error:
            raise ConnectRestError(f"{method} {self.url}{path}: no answer from the Connect worker ({error})") from None
        return json.loads(text) if text else None

    def connectors(self) -> list[str]:
        return list(self.call("GET", "/connectors"))

    def config(self, name: str) -> dict[str, str] | None:
        try:
            return dict(self.call("GET", f"/connectors/{_quote(name)}/config"))
        except ConnectRestError as error:
            if error.status == 404:
                return None
            raise

    def put_config(self, name: str, config: dict[str, str]) -> None:
        self.call("PUT", f"/connectors/{_quote(name)}/config", config)

    def status(self, name: str) -> dict[str, Any] | None:
        """None while no worker has reported one: Connect stores a connector's config first, and answers 404
        for its status until the worker that starts it has written one to the status topic."""
        try:
            return dict(self.call("GET", f"/connectors/{_quote(name)}/status"))
        except ConnectRestError as error:
            if error.status == 404:
                return None
            raise

    def restart_failed(self, name: str) -> None:
        self.call("POST", f"/connectors/{_quote(name)}/restart?includeTasks=true&onlyFailed=true")

    def plugins(self) -> list[str]:
        return [plugin["class"] for plugin in self.call("GET", "/connector-plugins?connectorsOnly=false")]


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")
