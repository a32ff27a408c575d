"""The cost of deny patterns over a catalog snapshot: 100k qualified names (a few with lookalike letters, as the
upstream listed them) against 3 deny patterns, as the policy computes a role set's allowed names.

Usage: python bench/deny_patterns.py [names]   (prints CPU ms, not wall time, as other work shares
the cores: the first run, the best of 5 more, and how many names were denied)"""

from __future__ import annotations

import random
import sys
import time

from indexer.tools import qualify
from service.policy.permissions import ALLOW_ALL, Rules, parse_permissions

VERBS = ["get", "list", "create", "update", "delete", "remove", "drop", "search", "read", "write", "send", "sync"]
NOUNS = ["repo", "issue", "file", "user", "table", "branch", "message", "invoice", "record", "page", "event"]
LOOKALIKES = ["d\u0435lete", "\uff44\uff45\uff4c\uff45\uff54\uff45", "DELETE", "Drop-Table", "dr\u03bfp"]


def catalog(size: int, seed: int = 7) -> list[tuple[str, str, str]]:
    """(qualified name, server, name as listed) for `size` tools of 500 servers; 1 in 100 respelled."""
    rng = random.Random(seed)
    tools = []
    for i in range(size):
        server = f"srv{i % 500}"
        verb = rng.choice(LOOKALIKES) if i % 100 == 0 else rng.choice(VERBS)
        name = f"{verb}_{rng.choice(NOUNS)}_{i}"
        tools.append((qualify(server, name), server, name))
    return tools


def main() -> None:
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    tools = catalog(size)
    permissions = parse_permissions({"roles": {"dev": {"allow": ["*"], "deny": ["*delete*", "*drop_*", "srv1__*"]}}})
    rules: Rules = permissions.rules_for(["dev"])
    assert rules is not ALLOW_ALL
    times, allowed = [], 0
    for _ in range(6):
        started = time.process_time()
        allowed = sum(1 for q, server, name in tools if rules.permits(q, server, name))
        times.append((time.process_time() - started) * 1000)
    cold, warm = times[0], min(times[1:])
    print(f"{size} names x {len(rules.deny)} deny patterns: {cold:.0f} ms first, ", end="")
    print(f"{warm:.0f} ms again (best of 5); {size - allowed} denied")


if __name__ == "__main__":
    main()
