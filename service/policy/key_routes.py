"""API keys over HTTP (admin only): create (the secret is shown once), list, revoke."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from service.db.models import ApiKey
from service.deps import KeysAdminDep, ResourcesDep, SessionDep
from service.errors import PermissionDenied
from service.policy import keys
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody, Text

router = APIRouter(prefix="/keys", tags=["keys"], route_class=StrictJsonBodyRoute)


class KeyCreateRequest(RequestBody):
    caller: Text = Field(min_length=1, max_length=128, description="The caller id the key acts as")
    roles: list[Text] = Field(default_factory=list, description="Roles of the permissions file, e.g. approver")


class KeyResponse(BaseModel):
    id: str
    prefix: str
    caller: str
    roles: list[str]
    created_at: str | None
    revoked_at: str | None


class KeyCreatedResponse(KeyResponse):
    key: str = Field(description="The secret; shown only in this answer")


class KeyListResponse(BaseModel):
    keys: list[KeyResponse]


@router.post("", response_model=KeyCreatedResponse, status_code=201)
async def create(
    request: KeyCreateRequest, session: SessionDep, resources: ResourcesDep, caller: KeysAdminDep
) -> dict[str, Any]:
    """A new key for a caller (admin key required: the first key is made with `toolscout keys create`)."""
    if caller.is_open:
        # Otherwise whoever reaches an open service first could create a key and lock the operator out.
        raise PermissionDenied(
            "Creating keys over HTTP needs an admin key; create the first one with "
            "`toolscout keys create --caller NAME --role admin`",
            caller=caller.id,
        )
    created = await keys.create_key(session, request.caller, request.roles)
    await session.commit()
    await keys.key_resolver(resources).changed()  # the other replicas' key caches forget too
    row = await session.get(ApiKey, created.id)
    assert row is not None
    return {**keys.key_view(row), "key": created.key}


@router.get("", response_model=KeyListResponse)
async def list_keys(session: SessionDep, caller: KeysAdminDep, include_revoked: bool = False) -> dict[str, Any]:
    """Stored keys (never their secrets)."""
    return {"keys": [keys.key_view(r) for r in await keys.list_keys(session, include_revoked)]}


@router.delete("/{key_id}", response_model=KeyResponse)
async def revoke(key_id: str, session: SessionDep, resources: ResourcesDep, caller: KeysAdminDep) -> dict[str, Any]:
    """Revoke a key by id or shown prefix; it stops working at once (other replicas hear of it over Redis)."""
    row = await keys.revoke_key(session, key_id)
    await session.commit()
    await keys.key_resolver(resources).changed()  # the other replicas' key caches forget too
    return keys.key_view(row)
