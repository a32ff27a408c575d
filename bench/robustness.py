"""Issue #12, the general case: does the search hold under the ways real requests are written?

Each request (the bundled real catalogs' requests of tests/search/test_real_catalog_queries.py, and a seeded sample
of each dev set of ../shared/eval) is rewritten as users and agents write it (case, punctuation, whitespace, Unicode
forms, a polite wrapper, markdown, a typo), and searched in the service's real search (the configured ONNX
embedder, an in-process index as `toolscout eval` builds it). Per rewriting: how many requests it changed, how often
the first result and the request's R@5 stay those of the clean request, and the mean R@5 clean -> rewritten.
Then each tool's name written another way (`Get-Current-Time`, `getCurrentTime`, in backticks, in a sentence):
how often the tool is still first, as it is for its name as listed.

Usage: python bench/robustness.py [--sample 300] [--names 100] [--sets real,metatool,sealtools] (the dev sets from
$TOOLSCOUT_EVAL_DIR, default ../shared/eval)"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import tempfile
import time
import unicodedata
from collections.abc import Callable
from pathlib import Path

from indexer.index.base import SearchFilter
from service.catalog.files import demo_catalog, load_catalog_file
from service.catalog.server_info import demo_servers
from service.catalog.service import register_tools
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.evaluation import _run_settings, load_queries
from service.search.service import start_search, warm_search
from service.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
EVAL = Path(os.environ.get("TOOLSCOUT_EVAL_DIR", ROOT.parent / "shared" / "eval"))
REAL = ROOT / "tests" / "fixtures" / "retrieval" / "real_catalog_queries.jsonl"
K = 10

_FULL_WIDTH = {c: c + 0xFEE0 for c in range(0x21, 0x7F)}
_WORD = re.compile(r"[A-Za-z]{5,}")


def _typo(text: str, rng: random.Random) -> str:
    """Two neighbouring letters of one word of five letters or more swapped (not its first)."""
    words = list(_WORD.finditer(text))
    if not words:
        return text
    word = rng.choice(words)
    i = rng.randrange(word.start() + 1, word.end() - 1)
    return text[:i] + text[i + 1] + text[i] + text[i + 2 :]


def _bold_longest(text: str) -> str:
    words = list(_WORD.finditer(text))
    if not words:
        return text
    w = max(words, key=lambda m: len(m.group()))
    return f"{text[: w.start()]}**{w.group()}**{text[w.end():]}"


def _lower_first(text: str) -> str:
    return text[:1].lower() + text[1:]


def _accented(text: str) -> str:
    """The request with its `e` of one word accented, decomposed (NFD: `e` + U+0301), as macOS files write it."""
    return unicodedata.normalize("NFD", re.sub(r"\bcafe\b", "café", text.replace("resume", "résumé")))


def _wrapped(text: str, width: int = 30) -> str:
    """Hard-wrapped at `width` characters, as a terminal or an e-mail sends a long request."""
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    return "\n".join([*lines, line])


PERTURBATIONS: dict[str, Callable[[str, random.Random], str]] = {
    "UPPER CASE": lambda t, r: t.upper(),
    "Title Case": lambda t, r: t.title(),
    "lower case": lambda t, r: t.lower(),
    "no punctuation": lambda t, r: re.sub(r"[^\w\s]", "", t),
    "extra punctuation": lambda t, r: t.rstrip(".?! ") + "?!!",
    "whitespace": lambda t, r: "  \n " + "  ".join(t.split(" ")) + " \t\n",
    "hard-wrapped lines": lambda t, r: _wrapped(t),
    "NFD accents": lambda t, r: _accented(t),
    "full-width letters": lambda t, r: t.translate(_FULL_WIDTH),
    "curly quotes": lambda t, r: t.replace("'", "\u2019").replace('"', "\u201c"),
    "non-breaking spaces": lambda t, r: t.replace(" ", "\u00a0"),
    "zero-width chars": lambda t, r: "\ufeff" + " \u200b".join(t.split(" ")).replace("e", "e\u200d", 1),
    "emoji": lambda t, r: "🔍 " + t + " 🙏",
    "polite wrapper": lambda t, r: f"Hey, could you please {_lower_first(t).rstrip('.?! ')}? Thanks!",
    "markdown bold": lambda t, r: _bold_longest(t),
    "bullet": lambda t, r: "- " + t,
    "code fence": lambda t, r: "```\n" + t + "\n```",
    "typo": _typo,
}


def _camel(words: list[str]) -> str:
    return words[0] + "".join(w.title() for w in words[1:])


NAME_FORMS: dict[str, Callable[[list[str], str], str]] = {
    "Title-Kebab": lambda w, n: "-".join(x.title() for x in w),
    "camelCase": lambda w, n: _camel(w),
    "UPPER_SNAKE": lambda w, n: "_".join(w).upper(),
    "spaced words": lambda w, n: " ".join(w),
    "`backticked`": lambda w, n: f"`{n}`",
    "**bold**": lambda w, n: f"**{n}**",
    "quoted": lambda w, n: f"\u201c{n}\u201d",
    "full-width": lambda w, n: n.translate(_FULL_WIDTH),
    "with spaces and newline": lambda w, n: f"  {n}\n",
}


async def _resources(tmp: Path, real: bool, catalog: Path | None) -> tuple[Resources, dict[str, str]]:
    """Started resources with the set's catalog registered, and each registered name's catalog id."""
    resources = build_resources(_run_settings(Settings(), tmp), None)
    await start_resources(resources)
    await start_search(resources)
    if real:
        report = await register_tools(resources, demo_catalog(), servers=demo_servers())
        ids = {name: name for name in (*report.created, *report.updated, *report.unchanged)}
    else:
        assert catalog is not None
        loaded = load_catalog_file(catalog)
        await register_tools(resources, loaded.tools)
        ids = dict(loaded.ids)
    await warm_search(resources)
    return resources, ids


async def _ranked(resources: Resources, ids: dict[str, str], text: str) -> list[str]:
    assert resources.retriever is not None
    outcome = await resources.retriever.search(text, K, SearchFilter())
    return list(dict.fromkeys(ids.get(r.name, r.name) for r in outcome.results))


def _recall5(ranked: list[str], relevant: set[str]) -> float:
    return len(relevant & set(ranked[:5])) / len(relevant)


async def measure(name: str, sample: int, names: int, seed: int) -> dict:
    real = name == "real"
    if real:
        rows = [json.loads(line) for line in REAL.read_text().splitlines()]
        queries = [(r["query"], set(r["relevant"])) for r in rows]
        catalog = None
    else:
        catalog = EVAL / name / "catalog.jsonl"
        queries = [(q.text, q.relevant) for q in load_queries(EVAL / name / "queries.jsonl", sample, seed)]
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="toolscout-robust-") as tmp:
        started = time.perf_counter()
        resources, ids = await _resources(Path(tmp), real, catalog)
        print(f"{name}: {len(ids)} tools indexed in {time.perf_counter() - started:.0f} s", flush=True)
        try:
            table: dict[str, dict[str, float]] = {}
            clean = [await _ranked(resources, ids, q) for q, _ in queries]
            for label, perturb in PERTURBATIONS.items():
                changed = same_top = same_r5 = 0
                r5_clean = r5_new = 0.0
                for (text, relevant), base in zip(queries, clean, strict=True):
                    new_text = perturb(text, rng)
                    if new_text == text:
                        continue
                    ranked = await _ranked(resources, ids, new_text)
                    changed += 1
                    same_top += ranked[:1] == base[:1]
                    before, after = _recall5(base, relevant), _recall5(ranked, relevant)
                    same_r5 += before == after
                    r5_clean += before
                    r5_new += after
                n = max(changed, 1)
                table[label] = {"queries": changed, "top1_same": same_top / n, "r5_same": same_r5 / n,
                                "r5_clean": r5_clean / n, "r5_perturbed": r5_new / n}
            names_table = await _name_forms(resources, ids, names, rng)
        finally:
            await close_resources(resources)
    return {"set": name, "queries": len(queries), "perturbations": table, "names": names_table}


async def _name_forms(resources: Resources, ids: dict[str, str], count: int, rng: random.Random) -> dict:
    """Each sampled tool's name written another way: how often the tool it names is still first."""
    from indexer.documents import split_identifier

    assert resources.retriever is not None
    directory = resources.retriever.directory
    registered = sorted(directory.names())
    tools = rng.sample(registered, min(count, len(registered)))
    if not tools:
        return {}
    table: dict[str, dict[str, float]] = {}
    listed = {q: directory.listed_name(q) or q for q in tools}
    base = {q: (await _ranked(resources, ids, listed[q]))[:1] for q in tools}
    table["as listed"] = {"tools": len(tools), "first": sum(base[q] == [ids.get(q, q)] for q in tools) / len(tools)}
    for label, form in NAME_FORMS.items():
        first = 0
        for q in tools:
            words = split_identifier(listed[q]).split() or [listed[q]]
            first += (await _ranked(resources, ids, form(words, listed[q])))[:1] == base[q]
        table[label] = {"tools": len(tools), "first": first / len(tools)}
    return table


def _print(result: dict) -> None:
    print(f"\n## {result['set']} ({result['queries']} requests)")
    print("| rewriting | requests changed | top 1 same | R@5 same | R@5 clean -> rewritten |")
    print("|---|---|---|---|---|")
    for label, row in result["perturbations"].items():
        print(f"| {label} | {row['queries']} | {row['top1_same']:.3f} | {row['r5_same']:.3f} "
              f"| {row['r5_clean']:.3f} -> {row['r5_perturbed']:.3f} |")
    print("| name written as | tools | first as for the listed name |")
    print("|---|---|---|")
    for label, row in result["names"].items():
        print(f"| {label} | {row['tools']} | {row['first']:.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=300)
    parser.add_argument("--names", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--sets", default="real,metatool,sealtools")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for name in args.sets.split(","):
        result = asyncio.run(measure(name, args.sample, args.names, args.seed))
        _print(result)
        results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
