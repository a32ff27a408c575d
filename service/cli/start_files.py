"""The files `toolscout serve` reads at its start, checked before anything starts: each problem one line naming
the place, where the service's start found it a traceback after the migrations, the index and the model."""

from __future__ import annotations

from service.errors import ToolscoutError
from service.settings import Settings


def servers_file_problem(settings: Settings) -> str | None:
    """Why the servers file cannot be read, before anything starts: the gateway's start found it a traceback later,
    after the migrations, the index and the model."""
    if settings.execution.servers_file is None:
        return None
    from service.upstream.config import load_servers_file

    try:
        load_servers_file(settings.execution.servers_file)
    except ToolscoutError as exc:
        return exc.detail
    return None


def permissions_file_problem(settings: Settings) -> str | None:
    """Why the permissions file cannot be used, before anything starts: the policy's start found it a 130-line
    traceback after the migrations, the index and the model."""
    from service.policy.permissions import PermissionsFileError, load_permissions

    try:
        load_permissions(settings.policy.permissions_file)
    except PermissionsFileError as exc:
        return str(exc)
    return None
