"""Which upstream MCP servers to run: the `mcpServers` file format MCP clients already use.

A servers file is JSON (or YAML) in the shape Claude Desktop, Cursor and VS Code read:

    {"mcpServers": {
        "time": {"command": "python", "args": ["-m", "mcp_server_time"], "env": {"TZ": "UTC"}, "cwd": "/tmp"},
        "docs": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer ${DOCS_TOKEN}"}}}}

`servers` (VS Code) is accepted in place of `mcpServers`; `type` may be `stdio`, `http` or `streamable-http`;
`disabled: true` skips an entry; `timeout` (seconds) overrides the call timeout of that server;
`egress_proxy: true` runs a stdio server behind the egress proxy (upstream/egress.py: no internal address). `${VAR}` and
`${env:VAR}` in commands, arguments, env, cwd, URL and headers are expanded from the environment when the
server starts, so secrets stay out of the file and out of the catalog database. Servers added over the API are
never expanded (they are refused when they hold a reference).

Without a servers file the demo servers of upstream/demo.py run (unless execution.demo_servers is off); the
choice is made in upstream/service.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from indexer.tools import normalize_server_id
from service.errors import InvalidRequest, json_pointer
from service.security.request_body import NUL_REASON

logger = logging.getLogger(__name__)

Transport = Literal["stdio", "http"]
Source = Literal["file", "demo", "api"]

_HTTP_TYPES = {"http", "streamable-http", "streamable_http", "streamablehttp"}
_VARIABLE = re.compile(r"\$\{(?:env:)?([A-Za-z_][A-Za-z0-9_]*)\}")
_REDACTED = "***"

# Demo servers: id -> (PyPI package, module) and id -> npm package.


class ServerSpec(BaseModel):
    """How to reach one upstream MCP server."""

    model_config = ConfigDict(frozen=True)

    id: str
    transport: Transport
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_seconds: float | None = None
    # A stdio server whose network connections go through the egress proxy (upstream/egress.py).
    egress_proxy: bool = False
    source: Source = "file"
    # A demo server that needs its toolchain before it can start: ("python", module) or ("node", package).
    demo: tuple[str, str] | None = None

    def config(self) -> dict[str, Any]:
        """What the catalog stores for this server (unexpanded, so `${VAR}` secrets stay out)."""
        config = self.model_dump(mode="json", exclude_none=True)
        if not self.egress_proxy:
            del config["egress_proxy"]  # the rows of servers that do not use it stay as they were
        return config

    def public_config(self) -> dict[str, Any]:
        """The configuration shown over the API: env and header values are redacted."""
        config = self.config()
        config.pop("demo", None)
        if self.env:
            config["env"] = {key: _REDACTED for key in self.env}
        if self.headers:
            config["headers"] = {key: _REDACTED for key in self.headers}
        return config

    def strings(self) -> dict[str, str]:
        """Every string that reaches the process or the request (a name of env or headers with its value), by the
        JSON pointer of its field."""
        fields = {"/command": self.command or "", "/cwd": self.cwd or "", "/url": self.url or ""}
        fields |= {json_pointer(("args", i)): arg for i, arg in enumerate(self.args)}
        fields |= {json_pointer(("env", key)): key + value for key, value in self.env.items()}
        fields |= {json_pointer(("headers", key)): key + value for key, value in self.headers.items()}
        return fields

    def variables(self) -> dict[str, list[str]]:
        """The `${VAR}` references of this spec, by the JSON pointer of the field holding them, in every field that
        expansion would touch."""
        found = {pointer: [m.group(0) for m in _VARIABLE.finditer(text)] for pointer, text in self.strings().items()}
        return {pointer: references for pointer, references in found.items() if references}

    def expanded(self) -> ServerSpec:
        """This spec with `${VAR}` references replaced from the environment (at start, never stored).

        Only for trusted configuration: a server added over the API could name the service's own secrets."""
        if self.source == "api":
            return self
        return self.model_copy(
            update={
                "command": _expand(self.command) if self.command else None,
                "args": tuple(_expand(a) for a in self.args),
                "env": {k: _expand(v) for k, v in self.env.items()},
                "cwd": _expand(self.cwd) if self.cwd else None,
                "url": _expand(self.url) if self.url else None,
                "headers": {k: _expand(v) for k, v in self.headers.items()},
            }
        )


def _expand(text: str) -> str:
    return _VARIABLE.sub(lambda m: os.environ.get(m.group(1), ""), text)


def _fail(where: str, reason: str) -> InvalidRequest:
    return InvalidRequest(f"{where}: {reason}", errors=[{"pointer": where, "reason": reason}])


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str | int | float) for v in value):
        raise _fail(where, "must be a list of strings")
    return tuple(str(v) for v in value)


def _string_map(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(isinstance(v, str | int | float | bool) for v in value.values()):
        raise _fail(where, "must be an object of string values")
    return {str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}


def parse_server_entry(server_id: str, entry: Any, *, source: Source = "file", where: str | None = None) -> ServerSpec:
    """One `mcpServers` entry as a ServerSpec; InvalidRequest names the bad field with its JSON pointer, under
    `where`, the entry's own (`/mcpServers/<id>` unless given; `/body` for a POST /servers body)."""
    where = where if where is not None else json_pointer(("mcpServers", server_id))
    spec = _parse_entry(server_id, entry, source, where)
    # No argv, environment, URL or header holds NUL: every start failed ("embedded null byte", a 502 naming nothing).
    for pointer, text in spec.strings().items():
        if "\x00" in text:
            raise _fail(f"{where}{pointer}", NUL_REASON)
    return spec


def _parse_entry(server_id: str, entry: Any, source: Source, where: str) -> ServerSpec:
    if not isinstance(entry, Mapping):
        raise _fail(where, "must be an object")
    sid = normalize_server_id(server_id)
    if not sid or not server_id.strip():
        raise _fail(where, "the server id is empty")
    _unknown_fields(entry, source, where)
    kind = str(entry.get("type") or entry.get("transport") or "").lower()
    timeout = entry.get("timeout_seconds", entry.get("timeout"))
    if timeout is not None and (not isinstance(timeout, int | float) or timeout <= 0):
        raise _fail(f"{where}/timeout", "must be a positive number of seconds")
    egress_proxy = entry.get("egress_proxy", False)
    if not isinstance(egress_proxy, bool):
        raise _fail(f"{where}/egress_proxy", "must be true or false")
    if kind == "sse":
        raise _fail(f"{where}/type", "the legacy SSE transport is not supported; use streamable HTTP")
    if "url" in entry or kind in _HTTP_TYPES:
        url = entry.get("url")
        if not isinstance(url, str) or not re.match(r"^(https?://|\$\{)", url):
            raise _fail(f"{where}/url", "must be an http:// or https:// URL")
        if egress_proxy:
            raise _fail(f"{where}/egress_proxy", "only a stdio server runs behind the egress proxy")
        return ServerSpec(
            id=sid,
            transport="http",
            url=url,
            headers=_string_map(entry.get("headers"), f"{where}/headers"),
            timeout_seconds=timeout,
            source=source,
        )
    if kind not in ("", "stdio"):
        raise _fail(f"{where}/type", f"unknown transport {kind!r} (stdio or http)")
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise _fail(f"{where}/command", "a stdio server needs a command (or give a url for streamable HTTP)")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _fail(f"{where}/cwd", "must be a string")
    return ServerSpec(
        id=sid,
        transport="stdio",
        command=command,
        args=_strings(entry.get("args"), f"{where}/args"),
        env=_string_map(entry.get("env"), f"{where}/env"),
        cwd=cwd,
        timeout_seconds=timeout,
        egress_proxy=egress_proxy,
        source=source,
    )


# What an entry may hold (VS Code's `transport` spelling and our `timeout_seconds` beside `timeout`).
ENTRY_FIELDS = (
    "command", "args", "env", "cwd", "url", "headers", "type", "transport", "timeout", "timeout_seconds",
    "egress_proxy", "disabled",
)


def _unknown_fields(entry: Mapping[str, Any], source: Source, where: str) -> None:
    """A field an entry may not hold is refused over the API (a misspelt `headerz` added the server without its
    credentials) and named in the log from a file, which may come from a client that adds fields of its own."""
    unknown = [str(key) for key in entry if key not in ENTRY_FIELDS]
    if not unknown:
        return
    if source == "api":
        raise _fail(where + json_pointer((unknown[0],)), f"not a field of a server (fields: {', '.join(ENTRY_FIELDS)})")
    logger.warning("servers file: %s: ignored %s: not a field of a server", where, ", ".join(unknown))


def server_entries(document: Any, *, root: str = "") -> list[tuple[str, Any, str]]:
    """The enabled entries of an `mcpServers` (or VS Code `servers`) document, each as (name, entry, the JSON
    pointer of the entry, under `root`: "" for a file, `/body` for a request)."""
    if not isinstance(document, Mapping):
        raise _fail(root, "a servers file is a JSON object with an `mcpServers` member")
    key = "mcpServers" if "mcpServers" in document else "servers" if "servers" in document else None
    if key is None:
        raise _fail(root, "a servers file is a JSON object with an `mcpServers` member")
    servers = document[key]
    if not isinstance(servers, Mapping):
        raise _fail(f"{root}/{key}", "must be an object of named servers")
    return [
        (str(name), entry, root + json_pointer((key, str(name))))
        for name, entry in servers.items()
        if not (isinstance(entry, Mapping) and entry.get("disabled") is True)
    ]


def parse_servers_document(document: Any, *, source: Source = "file") -> list[ServerSpec]:
    """All enabled servers of an `mcpServers` (or VS Code `servers`) document."""
    specs: dict[str, ServerSpec] = {}
    for name, entry, where in server_entries(document):
        spec = parse_server_entry(name, entry, source=source, where=where)
        if spec.id in specs:
            raise _fail(where, f"two servers have the id {spec.id!r}")
        specs[spec.id] = spec
    return list(specs.values())


def load_servers_file(path: Path) -> list[ServerSpec]:
    """Read a servers file (JSON, or YAML by extension)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidRequest(f"cannot read servers file {path}: {exc.strerror or exc}") from exc
    as_yaml = path.suffix.lower() in (".yaml", ".yml")
    try:
        document = yaml.safe_load(text) if as_yaml else json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        # A servers.txt was read as JSON and said to be "not valid YAML" with the JSON parser's words.
        hint = "" if as_yaml or path.suffix.lower() == ".json" else " (a file named .yaml or .yml is read as YAML)"
        kind = "YAML" if as_yaml else "JSON"
        raise InvalidRequest(f"servers file {path} is not valid {kind}: {_syntax_error(exc)}{hint}") from exc
    try:
        return parse_servers_document(document)
    except InvalidRequest as exc:
        raise InvalidRequest(f"servers file {path}: {exc.detail}", **exc.extensions) from exc


def _syntax_error(exc: Exception) -> str:
    """What is wrong and where, in one line: PyYAML's own text spans several, quoting the file around the place."""
    mark = getattr(exc, "problem_mark", None)
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem and mark is not None:
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())
