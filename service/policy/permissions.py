"""The permissions file: roles -> allow and deny glob patterns over servers and qualified tool names.

```yaml
roles:
  default:                # every caller has this role
    allow: ["server:docs"]
  developer:
    allow: ["server:github", "fs__read_*"]
    deny: ["github__delete_*"]
approver_roles: [approver, admin]
destructive: ["fs__write_*"]   # need an approval, besides tools annotated destructiveHint: true
```

A pattern is a glob over the qualified name (`github__create_*`), or `server:<glob>` over the server id.
Deny wins over allow, across every role of a caller. `admin` may use everything unless the file defines it.
Without a file every caller may use every tool. Pure: no I/O besides reading the file."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, Literal

import yaml

DEFAULT_ROLE = "default"
ADMIN_ROLE = "admin"
DEFAULT_APPROVER_ROLES = frozenset({"approver", ADMIN_ROLE})
SERVER_PREFIX = "server:"
TOOL_PREFIX = "tool:"
_TOP_KEYS = {"roles", "approver_roles", "destructive"}
_ROLE_KEYS = {"allow", "deny"}


class PermissionsFileError(ValueError):
    """The permissions file cannot be read or does not have the documented shape."""


@dataclass(frozen=True)
class Pattern:
    """One glob, over qualified tool names or over server ids."""

    kind: Literal["tool", "server"]
    glob: str

    @classmethod
    def parse(cls, text: str) -> Pattern:
        if text.startswith(SERVER_PREFIX):
            return cls("server", text[len(SERVER_PREFIX) :])
        if text.startswith(TOOL_PREFIX):
            return cls("tool", text[len(TOOL_PREFIX) :])
        return cls("tool", text)

    def matches(self, qualified_name: str, server: str) -> bool:
        return fnmatchcase(server if self.kind == "server" else qualified_name, self.glob)

    @property
    def matches_all(self) -> bool:
        return self.glob == "*"

    def __str__(self) -> str:
        return f"{SERVER_PREFIX}{self.glob}" if self.kind == "server" else self.glob


@dataclass(frozen=True)
class Rules:
    """Allow and deny patterns: of one role, or the union over a caller's roles."""

    allow: tuple[Pattern, ...] = ()
    deny: tuple[Pattern, ...] = ()

    def permits(self, qualified_name: str, server: str) -> bool:
        """Allowed by some pattern and denied by none."""
        if any(p.matches(qualified_name, server) for p in self.deny):
            return False
        return any(p.matches(qualified_name, server) for p in self.allow)

    @property
    def unrestricted(self) -> bool:
        """Everything is allowed and nothing denied: no filter is needed."""
        return not self.deny and any(p.matches_all for p in self.allow)

    def as_dict(self) -> dict[str, list[str]]:
        return {"allow": [str(p) for p in self.allow], "deny": [str(p) for p in self.deny]}


ALLOW_ALL = Rules(allow=(Pattern("tool", "*"),))


@dataclass(frozen=True)
class PermissionSet:
    """Every role's rules, the tools that need an approval and the roles that may grant one."""

    roles: Mapping[str, Rules] = field(default_factory=dict)
    destructive: tuple[Pattern, ...] = ()
    approver_roles: frozenset[str] = DEFAULT_APPROVER_ROLES
    restricted: bool = False  # False: no permissions file, everyone may use everything
    source: str | None = None

    def rules_for(self, roles: Iterable[str]) -> Rules:
        """The union of the rules of these roles (plus `default`); deny patterns of any role win."""
        if not self.restricted:
            return ALLOW_ALL
        allow: list[Pattern] = []
        deny: list[Pattern] = []
        for role in sorted({*roles, DEFAULT_ROLE}):
            rules = self.roles.get(role)
            if rules is None and role == ADMIN_ROLE:
                rules = ALLOW_ALL
            if rules is not None:
                allow.extend(rules.allow)
                deny.extend(rules.deny)
        return Rules(tuple(dict.fromkeys(allow)), tuple(dict.fromkeys(deny)))

    def permits(self, roles: Iterable[str], qualified_name: str, server: str) -> bool:
        """May a caller with these roles use this tool?"""
        return self.rules_for(roles).permits(qualified_name, server)

    def needs_approval(self, qualified_name: str, server: str, annotations: Mapping[str, Any] | None) -> bool:
        """Destructive: MCP `destructiveHint: true` (on a tool not marked read-only) or listed in the file."""
        hints = annotations or {}
        if hints.get("destructiveHint") is True and hints.get("readOnlyHint") is not True:
            return True
        return any(p.matches(qualified_name, server) for p in self.destructive)

    def is_approver(self, roles: Iterable[str]) -> bool:
        return bool(self.approver_roles & set(roles))


def _patterns(value: Any, where: str) -> tuple[Pattern, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PermissionsFileError(f"{where} must be a list of non-empty glob strings")
    patterns = tuple(Pattern.parse(v.strip()) for v in value)
    for pattern in patterns:
        if not pattern.glob:
            raise PermissionsFileError(f"{where}: empty pattern {str(pattern)!r}")
    return patterns


def parse_permissions(data: Any, source: str = "<permissions>") -> PermissionSet:
    """Validate the parsed YAML document of a permissions file."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PermissionsFileError(f"{source}: the top level must be a mapping")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise PermissionsFileError(f"{source}: unknown keys {sorted(unknown)}; expected {sorted(_TOP_KEYS)}")
    raw_roles = data.get("roles") or {}
    if not isinstance(raw_roles, dict):
        raise PermissionsFileError(f"{source}: roles must map role names to allow/deny lists")
    roles: dict[str, Rules] = {}
    for name, body in raw_roles.items():
        if not isinstance(name, str) or not name:
            raise PermissionsFileError(f"{source}: role names must be non-empty strings")
        body = body or {}
        if not isinstance(body, dict) or set(body) - _ROLE_KEYS:
            raise PermissionsFileError(f"{source}: role {name!r} may only have the keys allow and deny")
        roles[name] = Rules(
            _patterns(body.get("allow"), f"roles.{name}.allow"),
            _patterns(body.get("deny"), f"roles.{name}.deny"),
        )
    approvers = data.get("approver_roles", sorted(DEFAULT_APPROVER_ROLES))
    if not isinstance(approvers, list) or not all(isinstance(r, str) and r for r in approvers):
        raise PermissionsFileError(f"{source}: approver_roles must be a list of role names")
    return PermissionSet(
        roles=roles,
        destructive=_patterns(data.get("destructive"), "destructive"),
        approver_roles=frozenset(approvers),
        restricted=True,
        source=source,
    )


def load_permissions(path: Path | None) -> PermissionSet:
    """The permissions of a file, or the open set when no file is configured."""
    if path is None:
        return PermissionSet()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PermissionsFileError(f"cannot read permissions file {path}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise PermissionsFileError(f"permissions file {path} is not valid YAML: {exc}") from exc
    return parse_permissions(data, str(path))
