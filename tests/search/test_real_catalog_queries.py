"""Requests a new user would make against the bundled catalogs of real MCP servers (tests/fixtures/retrieval/
real_catalog_queries.jsonl): the expected tool must be in the top 1 or top 3, as each line says. The `blind-`
requests were written before any of their rankings was seen (a held-out check of the configuration), their line's
top as first measured (`blind15-` and `blind16-`: set as written, before the first run). A line with `"all": true`
names several tasks in one message: each of its tools must be in its top."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from indexer.embedding import SentenceTransformerEmbedder
from indexer.index.base import SearchFilter
from service.resources import Resources
from tests.conftest import FIXTURES, demo_resources

pytestmark = pytest.mark.model
CASES = [json.loads(line) for line in (FIXTURES / "retrieval" / "real_catalog_queries.jsonl").read_text().splitlines()]
# Still wrong with MiniLM and today's signals (issue 12): the position of the expected tool, measured.
KNOWN_MISSES = {
    "own-14": "git__git_reset is 6th: only BM25 matches 'unstage' to its 'Unstages all staged changes'; the dense "
    "fields put git_add ('added') and the filesystem tools ('file') nearer",
    "own-34": "no memory tool in the top 10: nothing in the memory server's text is near 'Remember that Bob prefers "
    "tea over coffee' for MiniLM, and the lead verb's write verbs only reorder a text's three best",
    "own-35": "no memory tool in the top 10, as own-34",
    # Written blind (stop 44) before any ranking was looked at, kept as measured:
    "blind-13": "git_diff is 5th: the branch tools' names share 'branch' with the request, nothing says 'compare'",
    "blind-19": "no memory tool in the top 10, as own-34 ('note that' names no tool's action)",
    "blind-22": "memory__open_nodes is 4th: 'entities' is in every entity tool's name and 'look up' in none",
    "blind-31": "github__list_commits is 5th: the git server's local tools are nearer to 'commits on the main branch'",
    # Written blind (2026-12-07, the second set) before any ranking was looked at; as measured after its round's fixes:
    "blind15-1": "time__get_current_time is 2nd, 0.01 behind convert_time, whose text says 'time' more often",
    "blind15-10": "filesystem__read_text_file is 7th: 'cat' is no verb MiniLM or any tool text knows as reading",
    "blind15-16": "filesystem__directory_tree is 3rd: git's status and branch tools are nearer to 'tree of the "
    "project' (a working tree)",
    "blind15-29": "git__git_reset is 4th: 'added' and 'staging' are git_add's words; nothing reads 'discard' as undo",
    "blind15-30": "github__create_pull_request is 3rd: 'raise' names no tool's verb, get_pull_request is nearer",
    "blind15-38": "github__get_file_contents is 6th: 'octocat/Hello-World' reads as a local path, not a repository",
    "blind15-41": "github__search_code is 5th: 'grep' is no verb of its text and the quoted code pulls the others",
    "blind15-44": "slack__slack_get_thread_replies is 2nd: reply_to_thread has the name verb of 'replied' and BM25's "
    "two hits are z-scored +1 and -1 however near",
    "blind15-46": "slack__slack_get_user_profile is 6th: 'timezone' puts the time server's tools first",
    "blind15-47": "no memory tool in the top 10, as own-34",
    "blind15-51": "git__git_commit is 2nd, after git_log: the dense fields read the request without its quoted "
    "'refactor', and the German words around 'commit' say nothing to MiniLM",
    "blind15-54": "git__git_add is not in the top 10: 'stage everything' is a part with its commit, and git_reset "
    "and the diffs are nearer to 'stage' alone",
    "blind15-56": "filesystem__write_file is not in the top 10: one sentence, no split at 'and save', and "
    "'changelog' pulls git_log",
    "blind15-58": "filesystem__directory_tree is 5th: git_show leads the whole request by its lead verb 'show'",
    "blind15-59": "github__update_issue is not in the top 10: one sentence, no split at 'and close', and 'pull "
    "request' spelled out fills the top with its tools",
    "blind15-60": "git__git_status is 7th: the whole request's staged-diff and commit tools lead its own part",
    # Written blind (2026-12-07, round 16) before any ranking was looked at; as measured after its round's fixes
    # (torch here; where the served ONNX int8 differs, said so):
    "blind16-18": "filesystem__list_allowed_directories is 5th (6th on ONNX): 'which directories you can touch' "
    "is the listing tools' text, 'allowed' is no word of the request",
    "blind16-20": "filesystem__write_file is not in the top 10: 'save it' names no tool's verb and 'it' nothing, "
    "and the path notes/summary.txt is read as written, not as a file",
    "blind16-21": "git__git_commit is 6th: 'ok now commit that' has nothing but the verb, and the name verb's 0.2 "
    "does not lift it past the commit-listing tools",
    "blind16-25": "time__get_current_time is 2nd, after git_add: 'and what's it in Tokyo then?' names no time",
    "blind16-37": "time__convert_time is 2nd after get_current_time (1st on ONNX): 'tz conv' spells neither word",
    "blind16-41": "git__git_status is not in the top 10: Italian ('mostrami lo stato') is no language of MiniLM's",
    "blind16-42": "time__get_current_time is 10th (8th on ONNX): 'che ore sono' says nothing to MiniLM",
    "blind16-43": "github__create_issue is 3rd after get_issue and update_issue: 'criar' is no verb it reads",
    "blind16-44": "filesystem__read_file is 3rd (2nd on ONNX) after gzip-file-as-resource: 'ler o arquivo' is "
    "Portuguese, only config.yaml says file",
    "blind16-45": "filesystem__create_directory is not in the top 10: Dutch ('maak een nieuwe map'), nothing of it "
    "is English",
    "blind16-47": "git__git_add is not in the top 10: one sentence, no split at ', stage' nor 'and commit'",
    "blind16-50": "memory__read_graph is 4th: the delete part's three delete tools lead, 'dump' names no read verb",
}


@pytest.fixture(scope="module")
async def demo(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Resources]:
    async with demo_resources(Path(tmp_path_factory.mktemp("real")), SentenceTransformerEmbedder()) as resources:
        yield resources


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c["qid"], marks=[pytest.mark.xfail(reason=KNOWN_MISSES[c["qid"]], strict=True)])
        if c["qid"] in KNOWN_MISSES
        else pytest.param(c, id=c["qid"])
        for c in CASES
    ],
)
async def test_the_expected_tool_is_in_the_top(demo: Resources, case: dict) -> None:
    assert demo.retriever is not None
    outcome = await demo.retriever.search(case["query"], 10, SearchFilter())
    ranked = [r.name for r in outcome.results]
    head = ranked[: case["top"]]
    found = set(case["relevant"]) <= set(head) if case.get("all") else set(case["relevant"]) & set(head)
    assert found, (case["query"], ranked[:5])


@pytest.mark.parametrize("k", [1, 3])
async def test_a_small_k_ranks_as_the_head_of_a_large_one(demo: Resources, k: int) -> None:
    """Fusion drops the candidates that cannot reach the top k (service/search/retrieval.py, bonus_bound): the
    head bonuses (lead verb, question's read verbs) go to a text's best three, which it always keeps."""
    assert demo.retriever is not None
    for case in CASES:
        small = await demo.retriever.search(case["query"], k, SearchFilter())
        large = await demo.retriever.search(case["query"], 50, SearchFilter())
        assert [(r.name, r.score) for r in small.results] == [(r.name, r.score) for r in large.results[:k]], case
