"""HTTP routes of the shared API keys (admin only): create, list (ids and tenants), revoke."""

from typing import Any

from fastapi import FastAPI, Response

from scheduler.api.models import KeyIn
from scheduler.api.shared_keys import SharedKeyStore
from scheduler.control.client import ValidationError

Record = dict[str, Any]


def add_key_routes(app: FastAPI, store: SharedKeyStore, admin: Any) -> None:
    """`admin`: the app's dependency that lets admin keys through only."""

    @app.post("/v1/api-keys", status_code=201, tags=["api keys"])
    def create_api_key(_: admin, body: KeyIn) -> Record:
        """A new key for a tenant (or an admin key): shown in this answer only, valid on every server."""
        if (body.tenant is None) == (not body.admin):
            raise ValidationError("INVALID_REQUEST", "give exactly one of `tenant` and `admin: true`")
        key = store.create(body.tenant)
        return {"key": key, "key_id": key.split("_")[1], "tenant": body.tenant, "admin": body.admin}

    @app.get("/v1/api-keys", tags=["api keys"])
    def list_api_keys(_: admin) -> Record:
        return {"keys": store.list()}

    @app.delete("/v1/api-keys/{key_id}", status_code=204, tags=["api keys"])
    def revoke_api_key(_: admin, key_id: str) -> Response:
        """Refused by every server once their views read the revocation (well under a second)."""
        store.revoke(key_id)
        return Response(status_code=204)
