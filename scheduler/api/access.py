"""Who may call a route: the bearer key's principal, the path's tenant if that key may act for it,
an admin key. Each is a FastAPI dependency, offered as an annotated type the routes declare.

A key of tenant A asking for tenant B gets 404, exactly as for a tenant that does not exist, so it
learns nothing about B."""
from typing import Annotated, Any

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from scheduler.api.errors import ApiError, not_found
from scheduler.api.keys import Keys, Principal


class Access:
    """`Annotated[..., Depends(...)]` types for the routes' signatures: `caller: access.caller` is the
    key's principal, `tenant: access.tenant` the path's tenant it may act for, `_: access.admin` an admin."""

    def __init__(self, keys: Keys) -> None:
        bearer = HTTPBearer(auto_error=False)

        def principal(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> Principal:
            found = keys.verify(creds.credentials) if creds is not None else None
            if found is None:
                raise ApiError(401, "UNAUTHENTICATED", "a valid API key is required: Authorization: Bearer <key>")
            return found

        Caller = Annotated[Principal, Depends(principal)]

        def scope(tenant: str, caller: Caller) -> str:
            """The path's tenant, if the caller's key may act for it; 404 otherwise (no existence leak)."""
            if not caller.may_access(tenant):
                raise not_found(f"tenant {tenant!r}")
            return tenant

        def admin(caller: Caller) -> Principal:
            if not caller.admin:
                raise ApiError(403, "FORBIDDEN", "an admin key is required")
            return caller

        self.caller: Any = Caller
        self.tenant: Any = Annotated[str, Depends(scope)]
        self.admin: Any = Annotated[Principal, Depends(admin)]
