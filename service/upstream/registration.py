"""What a server added over the API may be: no stdio unless allowed (and then only listed commands, with only listed
environment variables), no `${VAR}` references, and an HTTP URL that resolves to public addresses only (servers of
the servers file are trusted)."""

from __future__ import annotations

import os
import shutil

from service.errors import InvalidRequest, PermissionDenied
from service.settings import ExecutionSettings
from service.upstream.config import ServerSpec
from service.upstream.urls import check_upstream_url


def _resolved(command: str) -> str:
    found = shutil.which(command)
    return os.path.realpath(found) if found else command


def check_stdio_command(spec: ServerSpec, settings: ExecutionSettings) -> None:
    """Raise PermissionDenied unless stdio over the API is on and the command is allowed."""
    if not settings.allow_api_stdio:
        raise PermissionDenied(
            "Registering a stdio server over the API runs a command on this machine and is off; put the server "
            "in the servers file, or set execution.allow_api_stdio with execution.api_stdio_commands",
            server=spec.id,
        )
    command = spec.command or ""
    allowed = {_resolved(c) for c in settings.api_stdio_commands} | set(settings.api_stdio_commands)
    if command not in allowed and _resolved(command) not in allowed:
        raise PermissionDenied(
            f"The command {command!r} is not in execution.api_stdio_commands", server=spec.id, command=command
        )
    # The environment chooses what a command loads and runs: PYTHONWARNINGS with BROWSER made an allowed server
    # run a shell command, and so would NODE_OPTIONS, LD_PRELOAD or PATH. Only the names the deployer lists pass.
    if refused := sorted(set(spec.env) - set(settings.api_stdio_env)):
        raise PermissionDenied(
            f"Servers added over the API may set only the environment variables of execution.api_stdio_env, not "
            f"{', '.join(refused)}",
            server=spec.id,
            variables=refused,
        )


async def check_api_server(spec: ServerSpec, settings: ExecutionSettings, *, where: str) -> None:
    """Refuse a server added over the API that could run commands, read secrets or reach internal hosts; `where`:
    the JSON pointer of its entry, under which the errors point (`/body` for a POST /servers body)."""
    if found := spec.variables():
        references = sorted({reference for listed in found.values() for reference in listed})
        raise InvalidRequest(
            f"Servers added over the API may not use {', '.join(references)}: `${{VAR}}` is expanded only for "
            "servers of the servers file",
            errors=[
                {"pointer": where + pointer, "reason": f"environment reference {', '.join(listed)}"}
                for pointer, listed in found.items()
            ],
        )
    if spec.transport == "stdio":
        check_stdio_command(spec, settings)
    elif spec.url is not None:
        await check_upstream_url(spec.url, settings.upstream_allowed_hosts, pointer=f"{where}/url")
