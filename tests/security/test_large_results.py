"""A large result from an upstream server costs memory in proportion to its size, not fifty times it, and is
paged back exactly."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import pytest

from service.execution import results
from service.execution.results import count_tokens, encoding, token_offsets
from tests.security.conftest import make_settings, probe_entry, running, servers_file
from tests.security.scripted_servers import scripted_entry

TEXT = "héllo wörld 日本語 😀👍🏽"  # characters of 2, 3 and 4 bytes; emoji tokens start inside characters

# A stdio server whose `report` answers `done` and `words` more words beside `rows` rows of structured content.
REPORT_SERVER = """
tools = [{"name": "report", "description": "A summary and its rows.",
          "inputSchema": {"type": "object", "properties": {"rows": {"type": "integer"}, "words": {"type": "integer"}}}}]
def handle(method, mid, msg):
    if method == "tools/list":
        send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
    elif method == "tools/call":
        arguments = msg["params"]["arguments"]
        rows = [{"id": i, "name": "row number %d" % i} for i in range(arguments["rows"])]
        text = " ".join(["done"] + ["word"] * arguments.get("words", 0))
        send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}],
              "structuredContent": {"rows": rows}}})
serve("report", handle)
"""


async def stored_pages(http: httpx.AsyncClient, result_id: str) -> list[str]:
    """The texts of a stored result's pages of 100,000 tokens, in order."""
    pages, offset = [], 0
    while offset is not None:
        page = (await http.get(f"/results/{result_id}", params={"offset": offset, "limit": 100_000})).json()
        pages.append(page["text"])
        offset = page["next_offset"]
    return pages


async def test_a_large_result_is_measured_and_paged_in_bounded_memory(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, permissions=None)
    settings.execution.servers_file = servers_file(tmp_path, {"probe": probe_entry()})
    settings.execution.startup_wait_seconds = 60
    async with running(settings) as (_app, http):
        times = 150_000  # 4.5 MB of text, 2.4 million tokens
        tracemalloc.start()
        try:
            answer = await http.post(
                "/execute", json={"name": "probe__echo", "arguments": {"text": TEXT, "times": times}}
            )
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["truncated"] and result["returned_tokens"] == 4000
        # tiktoken's decode_with_offsets made a Python int and a bytes object of every token: 516 MiB here, 123 now.
        assert peak < 250 * 2**20, peak // 2**20
        pages = await stored_pages(http, result["result_id"])
        assert len(pages) == -(-result["total_tokens"] // 100_000)
        # The structured content the SDK wraps a tool's plain return in ({"result": text}) only repeats the text.
        assert "".join(pages) == " ".join([TEXT] * times)
        assert result["content"][0]["text"] == pages[0][: len(result["content"][0]["text"])]


def test_a_long_run_of_one_character_class_costs_what_prose_costs() -> None:
    # One run of letters (or spaces, or symbols) is one piece to tiktoken's BPE: 54 bytes and 0.65 us a character.
    # An upstream (or a file a caller wrote and reads back) answering 8 MB of "x" took the service 400 MB more.
    probe = (
        "import resource, sys\n"
        "from service.execution.results import count_tokens, load_tokenizer, token_offsets\n"
        "load_tokenizer()\n"
        "text = sys.argv[1] * 8_000_000\n"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "offsets = token_offsets(text)\n"
        "assert len(offsets) - 1 == count_tokens(text) and offsets[-1] == len(text)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    for character in ("x", " ", "="):
        grown = subprocess.run(
            [sys.executable, "-c", probe, character],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONPATH": root},
            cwd=root,
        )
        assert int(grown.stdout) < 120, (character, grown.stdout)  # MiB; was 400-430


def test_segmented_counting_is_exact_on_mixed_text() -> None:
    random.seed(7)
    words = [
        "hello",
        "world,",
        "fox.",
        "Ünïcode",
        "日本語",
        "😀👍🏽",
        "12345",
        "don't",
        "\n",
        "\n\n",
        "  ",
        "\t",
        "==",
        "a_b",
    ]
    for _ in range(5):
        text = "".join(random.choice(words) + random.choice([" ", "", "\n", "  "]) for _ in range(60_000))
        assert count_tokens(text) == len(encoding().encode(text, disallowed_special=()))
        offsets = token_offsets(text)
        assert len(offsets) - 1 == count_tokens(text) and offsets[-1] == len(text)


async def test_long_texts_are_measured_two_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each long text's token work holds memory in proportion to it (16 MB of prose: ~290 MiB for its offsets), and
    # anyio runs up to 40 threads: as many parallel calls with long results held as many at once.
    running_now, most = 0, 0
    lock = threading.Lock()
    cut_text = results.cut_text

    def counted(text: str, budget: int) -> results.Cut:
        nonlocal running_now, most
        with lock:
            running_now += 1
            most = max(most, running_now)
        time.sleep(0.2)
        try:
            return cut_text(text, budget)
        finally:
            with lock:
                running_now -= 1

    monkeypatch.setattr(results, "cut_text", counted)
    cuts = await asyncio.gather(*(results.measure("word " * 20_000, 100) for _ in range(6)))
    assert all(cut.truncated and cut.head_tokens == 100 for cut in cuts)
    assert most == results.TOKEN_WORKERS == 2


def compact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def report_settings(tmp_path: Path) -> Any:
    settings = make_settings(tmp_path, permissions=None)
    settings.execution.servers_file = servers_file(tmp_path, {"rep": scripted_entry(tmp_path, "rep", REPORT_SERVER)})
    settings.execution.startup_wait_seconds = 60
    return settings


async def test_structured_content_beside_a_short_text_is_held_to_the_token_budget(tmp_path: Path) -> None:
    # Only the text blocks were measured: "done" (1 token) came back with 3.9 MB of structured content beside it.
    small_rows = {"rows": [{"id": i, "name": f"row number {i}"} for i in range(3)]}
    async with running(report_settings(tmp_path)) as (_app, http):
        small = (await http.post("/execute", json={"name": "rep__report", "arguments": {"rows": 3}})).json()
        assert small["truncated"] is False and small["content"] == [{"type": "text", "text": "done"}]
        assert small["structured_content"] == {"rows": [{"id": i, "name": f"row number {i}"} for i in range(3)]}
        # The answer's tokens are its text's and its structured content's (only the text's were counted).
        assert small["total_tokens"] == small["returned_tokens"] == count_tokens("done\n" + compact(small_rows))
        answer = await http.post("/execute", json={"name": "rep__report", "arguments": {"rows": 20_000}})
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["truncated"] is True and result["structured_content"] is None, len(answer.content)
        assert result["returned_tokens"] == 4000 and result["total_tokens"] > 200_000
        assert len(answer.content) < 40_000
        rows = {"rows": [{"id": i, "name": f"row number {i}"} for i in range(20_000)]}
        pages = await stored_pages(http, result["result_id"])
        text = "".join(pages)
        assert text == "done\n" + compact(rows)
        assert result["content"][0]["text"] == text[: len(result["content"][0]["text"])]


async def test_text_and_structured_content_that_fit_apart_share_one_budget(tmp_path: Path) -> None:
    # 3,001 tokens of text and 3,304 of structured content each fit the 4,000-token budget: the answer held both,
    # 6,600 tokens, and said total_tokens 3,001.
    rows = {"rows": [{"id": i, "name": f"row number {i}"} for i in range(300)]}
    text = " ".join(["done"] + ["word"] * 3000)
    assert count_tokens(text) < 4000 and count_tokens(compact(rows)) < 4000
    whole = f"{text}\n{compact(rows)}"
    async with running(report_settings(tmp_path)) as (_app, http):
        answer = await http.post("/execute", json={"name": "rep__report", "arguments": {"rows": 300, "words": 3000}})
        assert answer.status_code == 200, answer.text
        result = answer.json()
        assert result["truncated"] is True and result["structured_content"] is None
        assert result["returned_tokens"] == 4000 and result["total_tokens"] == count_tokens(whole)
        assert result["content"][0]["text"] == whole[: len(result["content"][0]["text"])]
        assert "".join(await stored_pages(http, result["result_id"])) == whole
        # A text over the budget alone keeps its structured content in the stored text (it was dropped).
        answer = await http.post("/execute", json={"name": "rep__report", "arguments": {"rows": 3, "words": 5000}})
        result = answer.json()
        assert result["truncated"] is True and result["structured_content"] is None
        small = {"rows": [{"id": i, "name": f"row number {i}"} for i in range(3)]}
        long_text = " ".join(["done"] + ["word"] * 5000)
        assert "".join(await stored_pages(http, result["result_id"])) == f"{long_text}\n{compact(small)}"


async def test_structured_content_that_repeats_the_text_is_counted_and_left_out_first(tmp_path: Path) -> None:
    # The SDK answers a tool's plain string return as that text beside {"result": text}: both are counted, and
    # over the budget the text alone is the answer (it fits here: nothing to page, nothing lost).
    settings = make_settings(tmp_path, permissions=None)
    settings.execution.servers_file = servers_file(tmp_path, {"probe": probe_entry()})
    settings.execution.startup_wait_seconds = 60
    async with running(settings) as (_app, http):
        small = (await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": "hello"}})).json()
        assert small["structured_content"] == {"result": "hello"} and small["truncated"] is False
        assert small["total_tokens"] == small["returned_tokens"] == count_tokens('hello\n{"result":"hello"}')
        text = " ".join([TEXT] * 150)
        assert count_tokens(text) < 4000 < count_tokens(f"{text}\n{compact({'result': text})}")
        answer = await http.post("/execute", json={"name": "probe__echo", "arguments": {"text": TEXT, "times": 150}})
        result = answer.json()
        assert result["truncated"] is False and result["result_id"] is None
        assert result["content"] == [{"type": "text", "text": text}] and result["structured_content"] is None
        assert result["total_tokens"] == result["returned_tokens"] == count_tokens(text)
