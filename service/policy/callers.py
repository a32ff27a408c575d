"""Who is calling: a caller id with its roles (the open local user when the service runs without keys)."""

from __future__ import annotations

from dataclasses import dataclass

from service.policy.permissions import ADMIN_ROLE

LOCAL_CALLER = "local"


@dataclass(frozen=True)
class Caller:
    """An authenticated caller with its roles."""

    id: str
    roles: frozenset[str]
    key_id: str | None = None

    @property
    def is_admin(self) -> bool:
        return ADMIN_ROLE in self.roles

    @property
    def is_open(self) -> bool:
        """The local user of a service running without keys."""
        return self.key_id is None and self.id == LOCAL_CALLER


OPEN_CALLER = Caller(LOCAL_CALLER, frozenset({ADMIN_ROLE, "approver"}))
