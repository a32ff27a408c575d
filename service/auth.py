"""Who is calling: the caller resolved from the request's API key (or the open local user)."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

LOCAL_CALLER = "local"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller with its roles."""

    id: str
    roles: frozenset[str]
    key_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return "admin" in self.roles


OPEN_CALLER = Caller(LOCAL_CALLER, frozenset({"admin", "approver"}))


async def resolve_caller(request: Request) -> Caller:
    """The caller of a request. With no API keys configured the service runs open for one local user."""
    return OPEN_CALLER
