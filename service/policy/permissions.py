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
Deny wins over allow, across every role of a caller. Upstream servers spell their tool names as they like, so deny
and destructive patterns also catch a name spelled with other case or separators (`github__Delete-Repo`,
`github__deleteRepo`) or with lookalike letters (a Cyrillic `е`, fullwidth `ｄｅｌｅｔｅ`: both sides are folded to a
skeleton, NFKC and Unicode's confusables, and the name is also matched as the upstream listed it, since its
qualified name keeps no letter that is not ASCII); allow patterns match exactly, as a looser allow would widen
access.
`admin` may use everything unless the file defines it.
Without a file every caller may use every tool. Pure: no I/O besides reading the file."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase, translate
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Literal

import yaml

from indexer.tools import SEPARATOR
from service.policy.confusables import TABLE as CONFUSABLES

DEFAULT_ROLE = "default"
ADMIN_ROLE = "admin"
DEFAULT_APPROVER_ROLES = frozenset({"approver", ADMIN_ROLE})
SERVER_PREFIX = "server:"
TOOL_PREFIX = "tool:"
_TOP_KEYS = {"roles", "approver_roles", "destructive"}
_ROLE_KEYS = {"allow", "deny"}


_GLOB_CLASS = re.compile(r"(\[[^\]]*\])")
_SEPARATORS = re.compile(r"[-_]+")
# The ASCII lookalikes (`1` and `|` pass for `l`, `0` for `o`, `m` for `rn`): a few str.replace calls cost a fifth
# of one str.translate over a qualified name, and every name of a snapshot is folded.
_ASCII_CONFUSABLES = [(chr(code), target) for code, target in CONFUSABLES.items() if code < 128]


def skeleton(text: str) -> str:
    """What a name looks like: NFKC (fullwidth and styled letters), lookalikes mapped to the ASCII they pass for
    (service/policy/confusables.py), lower case. Mapped before lower-casing too: a Greek capital `Ν` passes for
    `N`, its small `ν` for `v`."""
    if text.isascii():
        text = text.lower()
        for character, target in _ASCII_CONFUSABLES:
            text = text.replace(character, target)
        return text
    return unicodedata.normalize("NFKC", text).translate(CONFUSABLES).lower().translate(CONFUSABLES)


def fold_spelling(text: str) -> str:
    """A name or glob without its spelling: its skeleton without `-` or `_` (a glob's `[...]` classes are only
    lower-cased)."""
    if "[" not in text:
        return skeleton(text).replace("-", "").replace("_", "")
    parts = _GLOB_CLASS.split(text)
    return "".join(part.lower() if part.startswith("[") else _SEPARATORS.sub("", skeleton(part)) for part in parts)


@lru_cache(maxsize=262_144)
def folded_name(name: str) -> str:
    """fold_spelling of a name, kept: a snapshot folds each name once for all of a role set's patterns, and the
    next snapshot (a role set, a catalog change) finds most of them folded."""
    return fold_spelling(name)


class PermissionsFileError(ValueError):
    """The permissions file cannot be read or does not have the documented shape."""


@dataclass(frozen=True)
class Pattern:
    """One glob, over qualified tool names or over server ids; a `spelling_blind` one (deny, destructive) also
    matches a name that differs in case, separators or lookalike letters."""

    kind: Literal["tool", "server"]
    glob: str
    spelling_blind: bool = False

    @classmethod
    def parse(cls, text: str, spelling_blind: bool = False) -> Pattern:
        if text.startswith(SERVER_PREFIX):
            return cls("server", text[len(SERVER_PREFIX) :], spelling_blind)
        if text.startswith(TOOL_PREFIX):
            return cls("tool", text[len(TOOL_PREFIX) :], spelling_blind)
        return cls("tool", text, spelling_blind)

    def matches(self, qualified_name: str, server: str, name: str | None = None) -> bool:
        """`name`: the tool's name as its upstream listed it, when the qualified name lost some of its letters;
        only a spelling-blind pattern reads it."""
        value = server if self.kind == "server" else qualified_name
        if not self.spelling_blind:
            return fnmatchcase(value, self.glob)
        by_spelling, by_case = self._blind_matchers
        if by_spelling(folded_name(value)) is not None:
            return True
        if by_case is not None and by_case(value.lower()) is not None:
            return True
        if self.kind == "server" or name is None:
            return False
        listed = server + SEPARATOR + name
        return listed != qualified_name and by_spelling(folded_name(listed)) is not None

    @cached_property
    def _blind_matchers(self) -> tuple[Callable[[str], Any], Callable[[str], Any] | None]:
        """Compiled once (a snapshot checks each pattern against every tool): the folded glob, and the lower-case
        one when a `?` or `[...]` of the glob may stand for a separator that folding removes."""
        by_spelling = re.compile(translate(fold_spelling(self.glob))).match
        by_case = re.compile(translate(self.glob.lower())).match if "?" in self.glob or "[" in self.glob else None
        return by_spelling, by_case

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

    def permits(self, qualified_name: str, server: str, name: str | None = None) -> bool:
        """Allowed by some pattern and denied by none (`name`: as the upstream listed it, for the deny patterns)."""
        if any(p.matches(qualified_name, server, name) for p in self.deny):
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

    def permits(self, roles: Iterable[str], qualified_name: str, server: str, name: str | None = None) -> bool:
        """May a caller with these roles use this tool?"""
        return self.rules_for(roles).permits(qualified_name, server, name)

    def needs_approval(
        self, qualified_name: str, server: str, annotations: Mapping[str, Any] | None, name: str | None = None
    ) -> bool:
        """Destructive: MCP `destructiveHint: true` (on a tool not marked read-only) or listed in the file."""
        hints = annotations or {}
        if hints.get("destructiveHint") is True and hints.get("readOnlyHint") is not True:
            return True
        return any(p.matches(qualified_name, server, name) for p in self.destructive)

    def is_approver(self, roles: Iterable[str]) -> bool:
        return bool(self.approver_roles & set(roles))


def _patterns(value: Any, where: str, spelling_blind: bool = False) -> tuple[Pattern, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise PermissionsFileError(f"{where} must be a list of non-empty glob strings")
    patterns = tuple(Pattern.parse(v.strip(), spelling_blind) for v in value)
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
            given = f" (given: {', '.join(sorted(map(str, set(body) - _ROLE_KEYS)))})" if isinstance(body, dict) else ""
            raise PermissionsFileError(f"{source}: role {name!r} may only have the keys allow and deny{given}")
        roles[name] = Rules(
            _patterns(body.get("allow"), f"roles.{name}.allow"),
            _patterns(body.get("deny"), f"roles.{name}.deny", spelling_blind=True),
        )
    approvers = data.get("approver_roles", sorted(DEFAULT_APPROVER_ROLES))
    if not isinstance(approvers, list) or not all(isinstance(r, str) and r for r in approvers):
        raise PermissionsFileError(f"{source}: approver_roles must be a list of role names")
    return PermissionSet(
        roles=roles,
        destructive=_patterns(data.get("destructive"), "destructive", spelling_blind=True),
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
