"""Permissions file (globs over servers and qualified names, deny wins), approvals' digests, token buckets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from service.policy.approvals import arguments_digest
from service.policy.permissions import PermissionSet, PermissionsFileError, load_permissions, parse_permissions
from service.policy.ratelimit import TokenBucketLimiter

FILE = """
roles:
  default:
    allow: ["server:docs"]
  developer:
    allow: ["server:github", "fs__read_*", "tool:fs__list_dir"]
    deny: ["github__delete_*"]
  auditor:
    allow: ["*"]
    deny: ["server:secrets", "*password*"]
  readonly:
    deny: ["server:github"]
approver_roles: [lead]
destructive: ["fs__write_*", "server:payments"]
"""


@pytest.fixture
def permissions(tmp_path: Path) -> PermissionSet:
    path = tmp_path / "permissions.yaml"
    path.write_text(FILE)
    return load_permissions(path)


def test_globs_match_qualified_names_and_servers(permissions: PermissionSet) -> None:
    dev = {"developer"}
    assert permissions.permits(dev, "github__create_issue", "github")
    assert permissions.permits(dev, "fs__read_file", "fs")
    assert permissions.permits(dev, "fs__list_dir", "fs")
    assert not permissions.permits(dev, "fs__write_file", "fs")
    assert not permissions.permits(dev, "slack__post", "slack")
    # `default` applies to every caller, with or without roles.
    assert permissions.permits(dev, "docs__search", "docs")
    assert permissions.permits(set(), "docs__search", "docs")
    assert not permissions.permits(set(), "github__create_issue", "github")


def test_server_patterns_match_the_server_not_a_name_prefix(permissions: PermissionSet) -> None:
    # A tool whose qualified name starts like an allowed server but belongs to another server.
    assert not permissions.permits({"developer"}, "github__x", "github_mirror")
    assert permissions.permits({"developer"}, "mirror__x", "github")


def test_deny_wins_within_a_role_and_across_roles(permissions: PermissionSet) -> None:
    assert not permissions.permits({"developer"}, "github__delete_repo", "github")
    assert permissions.permits({"auditor"}, "slack__post", "slack")
    assert not permissions.permits({"auditor"}, "secrets__get", "secrets")
    assert not permissions.permits({"auditor"}, "vault__reset_password", "vault")
    # readonly denies github even though developer allows it.
    assert not permissions.permits({"developer", "readonly"}, "github__create_issue", "github")
    assert permissions.permits({"developer", "readonly"}, "fs__read_file", "fs")


def test_admin_may_use_everything_unless_the_file_defines_it(permissions: PermissionSet) -> None:
    assert permissions.permits({"admin"}, "anything__at_all", "anything")
    restricted = parse_permissions({"roles": {"admin": {"allow": ["server:ops"]}}})
    assert restricted.permits({"admin"}, "ops__restart", "ops")
    assert not restricted.permits({"admin"}, "hr__fire", "hr")


def test_no_file_allows_everything_and_needs_no_filter() -> None:
    open_set = load_permissions(None)
    assert not open_set.restricted
    assert open_set.permits(set(), "any__tool", "any")
    assert open_set.rules_for(set()).unrestricted
    assert open_set.is_approver({"approver"}) and open_set.is_approver({"admin"})


def test_rules_union_and_unrestricted_flag(permissions: PermissionSet) -> None:
    rules = permissions.rules_for({"developer"})
    assert rules.as_dict() == {
        "allow": ["server:docs", "server:github", "fs__read_*", "fs__list_dir"],
        "deny": ["github__delete_*"],
    }
    assert not rules.unrestricted
    assert not permissions.rules_for({"auditor"}).unrestricted  # allows * but denies some
    assert permissions.rules_for({"admin"}).unrestricted  # admin's implicit "*" plus default's allow, no deny
    assert parse_permissions({"roles": {"all": {"allow": ["*"]}}}).rules_for({"all"}).unrestricted


def test_destructive_by_annotation_or_file(permissions: PermissionSet) -> None:
    assert permissions.needs_approval("git__reset", "git", {"destructiveHint": True})
    assert not permissions.needs_approval("git__reset", "git", {"destructiveHint": True, "readOnlyHint": True})
    assert not permissions.needs_approval("git__log", "git", {"destructiveHint": False})
    assert not permissions.needs_approval("git__log", "git", {})
    assert permissions.needs_approval("fs__write_file", "fs", {})
    assert permissions.needs_approval("payments__refund", "payments", None)
    assert permissions.is_approver({"lead"}) and not permissions.is_approver({"admin"})


@pytest.mark.parametrize(
    "renamed",
    ["github__Delete_repo", "github__DELETE_REPO", "github__delete-repo", "github__deleteRepo", "github__DeleteRepo"],
)
def test_deny_catches_a_tool_renamed_by_case_or_separators(permissions: PermissionSet, renamed: str) -> None:
    # Upstream servers choose their tool names and may change them at any re-list.
    assert not permissions.permits({"developer"}, renamed, "github")
    assert not permissions.permits({"auditor"}, "vault__reset_PassWord", "vault")
    assert not permissions.permits({"auditor"}, "vault__reset-pass-word", "vault")
    assert not permissions.permits({"auditor"}, "Secrets__get", "SECRETS")


def test_allow_stays_exact_so_a_renamed_tool_is_not_let_in(permissions: PermissionSet) -> None:
    assert permissions.permits({"developer"}, "fs__read_file", "fs")
    assert not permissions.permits({"developer"}, "fs__Read_file", "fs")
    assert not permissions.permits({"developer"}, "fs__readFile", "fs")
    assert not permissions.permits({"developer"}, "fs__list-dir", "fs")
    assert not permissions.permits({"developer"}, "GitHub__create_issue", "GitHub")


@pytest.mark.parametrize("renamed", ["fs__Write_file", "fs__WRITE-FILE", "fs__writeFile", "fs__write__file"])
def test_destructive_patterns_catch_a_renamed_tool(permissions: PermissionSet, renamed: str) -> None:
    assert permissions.needs_approval(renamed, "fs", {})
    assert permissions.needs_approval("payments__refund", "Payments", {})
    assert not permissions.needs_approval("fs__read_file", "fs", {})


@pytest.mark.parametrize(
    ("text", "folded"),
    [
        ("github__Delete-Repo", "githubdeleterepo"),
        ("github__delete_*", "githubdelete*"),
        ("fs__writeFile", "fswritefile"),
        ("[A-Z]_x?", "[a-z]x?"),
    ],
)
def test_spelling_fold_drops_case_and_separators(text: str, folded: str) -> None:
    from service.policy.permissions import fold_spelling

    assert fold_spelling(text) == folded


@pytest.mark.parametrize("deny", ["a?b", "a[_]b", "a[-_]b"])
def test_deny_still_matches_what_a_case_blind_glob_matches(deny: str) -> None:
    # A `?` or a class that matches the separator itself: the folded name has no separator left to match.
    rules = parse_permissions({"roles": {"r": {"allow": ["*"], "deny": [deny]}}})
    assert rules.permits({"r"}, "a__b", "x")
    assert not rules.permits({"r"}, "A_B", "x")


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([1, 2], "top level must be a mapping"),
        ({"role": {}}, "unknown keys"),
        ({"roles": {"x": {"allow": "ok", "permit": ["*"]}}}, "may only have the keys allow and deny"),
        ({"roles": {"x": {"allow": [3]}}}, "roles.x.allow must be a list of non-empty glob strings"),
        ({"roles": {"x": {"deny": ["server:"]}}}, "empty pattern"),
        ({"approver_roles": "lead"}, "approver_roles must be a list"),
    ],
)
def test_malformed_files_are_refused_with_the_reason(document: object, message: str) -> None:
    with pytest.raises(PermissionsFileError, match=message):
        parse_permissions(document)


def test_unreadable_or_invalid_yaml_file(tmp_path: Path) -> None:
    with pytest.raises(PermissionsFileError, match="cannot read"):
        load_permissions(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("roles: [unclosed")
    with pytest.raises(PermissionsFileError, match="not valid YAML"):
        load_permissions(bad)
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    loaded = load_permissions(empty)
    assert loaded.restricted and not loaded.permits({"x"}, "a__b", "a")
    assert yaml.safe_load(FILE)["roles"]["developer"]["deny"] == ["github__delete_*"]


def test_arguments_digest_is_canonical() -> None:
    assert arguments_digest({"b": 1, "a": [1, "x"]}) == arguments_digest({"a": [1, "x"], "b": 1})
    assert arguments_digest({"a": 1}) != arguments_digest({"a": 2})
    assert arguments_digest(None) == arguments_digest({})
    assert len(arguments_digest({"é": "ü"})) == 64


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_allows_a_burst_then_refills_at_the_rate() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate_per_minute=60, burst=3, clock=clock)  # one token a second
    assert [limiter.acquire("k") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire("k") == pytest.approx(1.0)
    clock.now += 0.5
    assert limiter.acquire("k") == pytest.approx(0.5)
    clock.now += 0.5
    assert limiter.acquire("k") == 0.0
    assert limiter.acquire("k") == pytest.approx(1.0)
    # Buckets are per key, and refill no further than the burst.
    assert limiter.acquire("other") == 0.0
    clock.now += 3600
    assert [limiter.acquire("k") for _ in range(4)][-1] == pytest.approx(1.0)


def test_token_bucket_costs_and_disabled_limits() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate_per_minute=120, burst=10, clock=clock)  # two tokens a second
    assert limiter.acquire("k", cost=8) == 0.0
    assert limiter.acquire("k", cost=4) == pytest.approx(1.0)  # needs 2 more tokens at 2/s
    assert TokenBucketLimiter(0, 1).acquire("k", cost=1000) == 0.0


def test_token_bucket_memory_is_bounded() -> None:
    clock = FakeClock()
    limiter = TokenBucketLimiter(rate_per_minute=60, burst=1, clock=clock, max_keys=100)
    for i in range(1000):
        limiter.acquire(f"key{i}")
        clock.now += 0.001
    assert len(limiter) <= 200
    clock.now += 10  # every bucket full again: evicting loses nothing
    limiter.acquire("fresh")
    assert len(limiter) <= 101
