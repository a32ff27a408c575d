"""Profiles: named scopes of the front end, read from `frontend.profiles_file` (YAML or JSON).

```yaml
profiles:
  coding:
    description: Code review and repository work
    servers: [git, github, filesystem]   # only these servers (default: all)
    tags: [code]                         # only tools with one of these tags (default: any)
    always_listed: [git__git_status]     # listed in every mode, in scope even outside servers/tags
    default_k: 8                         # search_tools k when the client gives none
```
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from indexer.json_pointer import pointer_token
from indexer.tools import SEPARATOR, normalize_server_id
from service.errors import BadRequest


class ProfileError(BadRequest):
    slug, title = "invalid-profile", "Invalid front-end profile"


class Profile(BaseModel):
    """One named scope: which servers and tags a front end may search and call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    servers: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    always_listed: tuple[str, ...] = ()
    default_k: int | None = Field(default=None, ge=1, le=50)

    @field_validator("servers")
    @classmethod
    def _normalize_servers(cls, servers: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(dict.fromkeys(normalize_server_id(s) for s in servers))

    def allows(self, tool: Mapping[str, Any]) -> bool:
        """Whether a tool (REST shape: name, server, tags) is inside this scope."""
        if tool.get("name") in self.always_listed:
            return True
        if self.servers and tool.get("server") not in self.servers:
            return False
        return not self.tags or bool(set(tool.get("tags") or ()) & set(self.tags))

    def allows_server(self, server: str) -> bool:
        """Whether a server's tools may be in scope at all."""
        return not self.servers or normalize_server_id(server) in self.servers

    def may_concern(self, server: str) -> bool:
        """Whether a change to a server's tools may change this scope: one of its servers, or the server of an
        always-listed tool (a qualified name starts with its server's id)."""
        server = normalize_server_id(server)
        return self.allows_server(server) or any(name.startswith(f"{server}{SEPARATOR}") for name in self.always_listed)


def load_profiles(path: Path | None) -> dict[str, Profile]:
    """Every profile of the file, by name; no file means no profiles."""
    if path is None:
        return {}
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ProfileError(f"Cannot read the profiles file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise ProfileError(f"The profiles file {path} is not valid YAML or JSON: {_yaml_problem(exc)}") from exc
    if raw is None:
        return {}
    prefix = ""
    if isinstance(raw, Mapping) and "profiles" in raw:
        raw, prefix = raw["profiles"], "/profiles"
    if not isinstance(raw, Mapping):
        raise ProfileError(f"{path}: expected a mapping of profile names to scopes under `profiles`")
    profiles: dict[str, Profile] = {}
    for name, body in raw.items():
        if not isinstance(body, Mapping):
            raise ProfileError(f"{path}: profile {name!r} must be a mapping")
        try:
            profiles[str(name)] = Profile(name=str(name), **body)
        except ValidationError as exc:
            errors = [
                {
                    "pointer": prefix + "".join(f"/{pointer_token(p)}" for p in (name, *e["loc"])),
                    "reason": _said(e["msg"]),
                }
                for e in exc.errors()
            ]
            reasons = "; ".join(f"{e['pointer']}: {e['reason']}" for e in errors)
            raise ProfileError(f"{path}: profile {name!r} is invalid: {reasons}", errors=errors) from exc
        except TypeError as exc:  # a key that is not a string
            raise ProfileError(f"{path}: profile {name!r} is invalid: {exc}") from exc
    return profiles


def _yaml_problem(error: yaml.YAMLError) -> str:
    """A parser error on one line: what and where (PyYAML's own text spans several, with the source quoted)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)


def select_profile(path: Path | None, name: str | None) -> Profile | None:
    """The profile called `name` (None: no profile, the whole catalog)."""
    if name is None:
        return None
    profiles = load_profiles(path)
    if name not in profiles:
        if path is None:
            raise ProfileError(
                f"No profile named {name!r}: no profiles file is set (TOOLSCOUT_FRONTEND__PROFILES_FILE)"
            )
        known = ", ".join(sorted(profiles)) or "none"
        raise ProfileError(f"No profile named {name!r} in {path}; known profiles: {known}")
    return profiles[name]


def _said(message: str) -> str:
    """pydantic's words for a profile's list (`servers: git` was "Input should be a valid tuple": YAML has lists)."""
    return message.replace("a valid tuple", "a list")
