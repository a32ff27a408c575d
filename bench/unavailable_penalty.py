"""What `search.unavailable_penalty` does on the default demo: the bundled catalog with the real model, the github and
slack servers without a connection (their tools unavailable), every other server ready, as `scripts/serve.sh` runs
(everything__simulate-research-query unavailable too: its server runs it only as a task).

Requests: the labelled real-catalog queries (tests/fixtures/retrieval/real_catalog_queries.jsonl) and a dozen
everyday requests of a new user (below), each with the tools that do what it asks. For each penalty, over k=5:
  top1_unavailable  requests whose first result cannot be called (the agent that takes it wastes a turn)
  top1_usable       requests with a relevant available tool whose first result is one
  only_unavailable  requests whose relevant tools are all unavailable whose first result is still one of them
                    (a penalty that puts an unrelated available tool first there misleads)
  mrr_usable        mean reciprocal rank of the first relevant available tool (requests that have one)
  lists_reordered   requests whose k results the penalty put in another order

Usage: PYTHONPATH=. python bench/unavailable_penalty.py [PENALTY ...]"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path

from indexer.embedding import SentenceTransformerEmbedder
from indexer.index.base import SearchFilter
from service.search.availability import rank_by_availability
from tests.conftest import FIXTURES, demo_resources

UNCONNECTED = {"github", "slack"}  # the demo catalog's servers that the demo does not start
READY = {"everything", "fetch", "filesystem", "git", "memory", "time"}
TASK_ONLY = {"everything__simulate-research-query"}  # taskSupport "required": each call of it fails
EVERYDAY = [
    ("tell my team on Slack that the build is fixed", ["slack__slack_post_message"]),
    ("show me the recent commits", ["git__git_log"]),
    ("create a branch for the new feature", ["git__git_create_branch"]),
    ("what files are in this project", ["filesystem__list_directory", "filesystem__directory_tree"]),
    ("read the README file", ["filesystem__read_text_file", "filesystem__read_file"]),
    ("get the text of https://wttr.in/Paris", ["fetch__fetch"]),
    ("what time is it in Paris right now", ["time__get_current_time"]),
    ("note that the meeting moved to Thursday", ["memory__create_entities", "memory__add_observations"]),
    ("show me what I changed but have not committed yet", ["git__git_diff_unstaged", "git__git_status"]),
    ("list the open issues of my repository", ["github__list_issues"]),
    ("send a message to the design channel", ["slack__slack_post_message"]),
    ("show the diff of my last commit", ["git__git_show"]),
]
PENALTIES = [0.0, 0.1, 0.25, 0.5, 1.0, 2.0, 3.0]


def cases() -> list[tuple[str, list[str]]]:
    lines = (FIXTURES / "retrieval" / "real_catalog_queries.jsonl").read_text().splitlines()
    labelled = [(c["query"], c["relevant"]) for c in map(json.loads, lines)]
    return labelled + EVERYDAY


def usable(name: str) -> bool:
    return name.split("__", 1)[0] in READY and name not in TASK_ONLY


def unavailable(server: str, tool: str) -> str | None:
    """As the demo's gateway answers it (service/search/availability.py)."""
    if server not in READY:
        return "catalog"
    return "task_required" if f"{server}__{tool}" in TASK_ONLY else None


async def main(penalties: list[float]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        async with demo_resources(Path(folder), SentenceTransformerEmbedder()) as resources:
            assert resources.retriever is not None
            ranked = []
            for query, relevant in cases():
                outcome = await resources.retriever.search(query, 5, SearchFilter())
                ranked.append((query, relevant, outcome.results))
    gaps = []
    print(f"{len(ranked)} requests, k=5; unavailable: {sorted(UNCONNECTED)} and {sorted(TASK_ONLY)}")
    for penalty in penalties:
        top1_unavailable = top1_usable = only_unavailable = 0
        with_usable = only = 0
        rr = 0.0
        reordered = 0
        for _, relevant, results in ranked:
            hits = rank_by_availability(results, unavailable, penalty)
            names = [h.name for h in hits]
            reordered += names != [r.name for r in results]
            if penalty == penalties[0] and not hits[0].available:
                # how far behind the first unavailable result's best available one is
                gaps.append(round(hits[0].score - max((h.score for h in hits if h.available), default=0.0), 3))
            top1_unavailable += not hits[0].available
            if any(usable(r) for r in relevant):
                with_usable += 1
                top1_usable += names[0] in relevant and usable(names[0])
                rank = next((i for i, n in enumerate(names, 1) if n in relevant and usable(n)), None)
                rr += 1 / rank if rank else 0.0
            else:
                only += 1
                only_unavailable += names[0] in relevant
        print(
            f"penalty {penalty:<5} top1_unavailable {top1_unavailable:>2}/{len(ranked)}  "
            f"top1_usable {top1_usable:>2}/{with_usable}  only_unavailable {only_unavailable:>2}/{only}  "
            f"mrr_usable {rr / with_usable:.3f}  lists_reordered {reordered}"
        )
    print(f"score lead of an unavailable first result over the best available one (penalty {penalties[0]}):")
    print(sorted(gaps))


if __name__ == "__main__":
    asyncio.run(main([float(p) for p in sys.argv[1:]] or PENALTIES))
