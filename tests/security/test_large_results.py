"""A large result from an upstream server costs memory in proportion to its size, not fifty times it, and is
paged back exactly."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

from tests.security.conftest import make_settings, probe_entry, running, servers_file

TEXT = "héllo wörld 日本語 😀👍🏽"  # characters of 2, 3 and 4 bytes; emoji tokens start inside characters


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
        # tiktoken's decode_with_offsets made a Python int and a bytes object of every token: 516 MiB here, 132 now.
        assert peak < 250 * 2**20, peak // 2**20
        pages, offset = [], 0
        while offset is not None:
            page = (
                await http.get(f"/results/{result['result_id']}", params={"offset": offset, "limit": 100_000})
            ).json()
            pages.append(page["text"])
            offset = page["next_offset"]
        assert len(pages) == -(-result["total_tokens"] // 100_000)
        assert "".join(pages) == " ".join([TEXT] * times)
        assert result["content"][0]["text"] == pages[0][: len(result["content"][0]["text"])]
