"""The closest names of an unknown tool from the close-name index (indexer/close_index.py) against the rules applied
to every name (indexer/closest.py's close_names) and against the pooled comparison it replaced (up to 500 names of
the asked server, nearest in length): misspellings of real names (the bundled demo catalogs and the retrieval
fixture) and of a synthetic catalog of 10k and 100k tools; ms per lookup (medians) and the index's memory.

    PYTHONPATH=. .venv/bin/python bench/closest_names.py [--lookups 2000] [--full 200]
"""

from __future__ import annotations

import argparse
import heapq
import json
import random
import statistics
import string
import time
import tracemalloc
from functools import partial
from pathlib import Path

from indexer.close_index import CloseNameIndex
from indexer.closest import close_names
from indexer.documents import normalize_name_key
from service.catalog.files import demo_catalog
from service.search.retrieval import NameDirectory

ROOT = Path(__file__).resolve().parent.parent
VERBS = (
    "get list create update delete search fetch read write move copy send post find run query sync add remove".split()
)
NOUNS = (
    "file files issue issues pull_request repo branch commit user users message channel weather forecast time zone "
    "node nodes entity entities relation memory page url document table row column record invoice order customer "
    "payment email event calendar task project comment label tag image video audio note folder directory"
).split()


def real_tools() -> list[tuple[str, str]]:
    """(server, listed name) of the bundled catalogs."""
    tools = [(str(t.get("server", "demo")), str(t["name"])) for t in demo_catalog()]
    for line in (ROOT / "tests/fixtures/retrieval/catalog.jsonl").read_text().splitlines():
        row = json.loads(line)
        tools.append(("".join(c for c in row["server"].lower() if c.isalnum())[:20] or "x", row["name"]))
    return tools


def synthetic_tools(count: int, rng: random.Random) -> list[tuple[str, str]]:
    servers = [f"{rng.choice(NOUNS).replace('_', '')}{i}" for i in range(max(1, count // 500))]
    tools: set[tuple[str, str]] = set()
    while len(tools) < count:
        words = [rng.choice(VERBS), *rng.sample(NOUNS, rng.randint(1, 3))]
        name = "_".join(words)
        if rng.random() < 0.2:
            name = words[0] + "".join(w.title().replace("_", "") for w in words[1:])
        if rng.random() < 0.3:
            name += f"_{rng.randint(1, 99)}"
        tools.add((rng.choice(servers), name))
    return sorted(tools)


def directory_of(tools: list[tuple[str, str]]) -> NameDirectory:
    directory = NameDirectory()
    for server, name in tools:
        directory.add(f"{server}__{name}", name, server, [])
    return directory


def misspelt(qualified: str, rng: random.Random) -> str:
    """A name a caller might have meant `qualified` by: typos, another spelling, another or no server, a word
    dropped or added."""
    server, _, tool = qualified.partition("__")
    kind = rng.random()
    if kind < 0.15:
        name = tool
    elif kind < 0.25:
        name = f"{rng.choice(NOUNS)}__{tool}"
    elif kind < 0.35:
        name = qualified.upper().replace("_", "-", rng.randint(0, 3))
    else:
        name = qualified
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        i = rng.randrange(len(name) + 1)
        op = rng.random()
        if op < 0.25 and len(name) > 1:
            name = name[: min(i, len(name) - 1)] + name[min(i, len(name) - 1) + 1 :]
        elif op < 0.5:
            name = name[:i] + rng.choice(string.ascii_lowercase + "_") + name[i:]
        elif op < 0.75 and i < len(name):
            name = name[:i] + rng.choice(string.ascii_lowercase) + name[i + 1 :]
        elif 0 < i < len(name):
            name = name[: i - 1] + name[i] + name[i - 1] + name[i + 1 :]
    if rng.random() < 0.1:
        name += "_" + rng.choice(NOUNS)
    return name or "x"


def pooled_closest(directory: NameDirectory, name: str, n: int = 5) -> list[str]:
    """NameDirectory.closest before the index, for a caller allowed every tool."""
    pool = list(directory._entries)
    if len(pool) > 500:
        server, separator, tool = name.partition("__")
        same_server = [q for q in pool if separator and q.startswith(server + separator)]
        pool = heapq.nsmallest(500, same_server or pool, key=lambda q: abs(len(q) - len(name)))
        spelt = set().union(*(directory._by_key.get(normalize_name_key(k), ()) for k in (name, tool)))
        pool += sorted(spelt - set(pool))
    return close_names(name, {q: directory._original[q] for q in pool}, n)


def every_name(directory: NameDirectory, name: str) -> list[str]:
    return close_names(name, dict(directory._original), 5)


def median_ms(function, names: list[str]) -> float:  # type: ignore[no-untyped-def]
    times = []
    for name in names:
        started = time.perf_counter()
        function(name)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def index_memory(tools: list[tuple[str, str]]) -> float:
    tracemalloc.start()
    index = CloseNameIndex()
    for server, name in tools:
        index.add(f"{server}__{name}", name)
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return size / 2**20


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lookups", type=int, default=2000)
    parser.add_argument("--full", type=int, default=200, help="lookups checked against every name at 10k and 100k")
    args = parser.parse_args()
    rng = random.Random(13)
    real = real_tools()
    directory = directory_of(real)
    names = [misspelt(rng.choice(list(directory._entries)), rng) for _ in range(args.lookups * 2)]
    same = sum(directory.closest(n) == every_name(directory, n) for n in names)
    print(f"bundled catalogs ({len(directory)} names): {same}/{len(names)} lookups the same as every name's rules")
    for size in (10_000, 100_000):
        tools = real + synthetic_tools(size - len(real), rng)
        directory = directory_of(tools)
        qualified = list(directory._entries)
        asked = [misspelt(rng.choice(qualified[: len(real)] if i % 2 else qualified), rng) for i in range(args.lookups)]
        full = sum(directory.closest(n) == every_name(directory, n) for n in asked[: args.full])
        pooled = sum(directory.closest(n) == pooled_closest(directory, n) for n in asked)
        found = sum(bool(directory.closest(n)) for n in asked)
        print(
            f"{len(directory)} names: {full}/{min(args.full, len(asked))} the same as every name's rules, "
            f"{pooled}/{len(asked)} as the pooled comparison; {found} with a suggestion; "
            f"ms per lookup (median) pooled {median_ms(partial(pooled_closest, directory), asked):.2f}, "
            f"index {median_ms(directory.closest, asked):.3f}; index memory {index_memory(tools):.0f} MiB"
        )


if __name__ == "__main__":
    main()
