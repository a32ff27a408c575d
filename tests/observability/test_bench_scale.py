"""`toolscout bench scale`'s arithmetic (each round's p50 over the reference size's p50 of the same round), the
benchmarks' server that does not start, and `bench load`'s first search after ready."""

from __future__ import annotations

from pathlib import Path

import pytest

from service.benchmarks.load import ServerNotReady, first_search, start_server, stop_server
from service.benchmarks.scale import ratios


def test_each_round_is_compared_with_the_reference_served_next_to_it() -> None:
    p50s = {
        10_000: {"short": [6.0, 8.0, 7.0], "long": [15.0, 16.0, 18.0]},
        100_000: {"short": [9.0, 10.0, 14.0], "long": [24.0, 24.0, 27.0]},
    }
    out = ratios(p50s, 10_000)
    assert out[10_000]["short"]["per_round"] == [1.0, 1.0, 1.0]
    assert out[100_000]["short"]["per_round"] == [1.5, 1.25, 2.0]
    assert out[100_000]["short"]["median_of_rounds"] == 1.5
    assert out[100_000]["short"]["of_medians"] == pytest.approx(10.0 / 7.0, abs=1e-3)
    assert out[100_000]["long"]["per_round"] == [1.6, 1.5, 1.5]
    assert out[100_000]["long"]["p50_ms"] == [24.0, 24.0, 27.0]


def test_a_benchmark_server_that_cannot_start_is_one_line_of_why(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("")
    with pytest.raises(ServerNotReady) as raised:
        start_server(0, not_a_folder / "data")
    message = str(raised.value)
    assert message.startswith("toolscout serve exited with status 3 before it was ready: ")
    assert "Not a directory" in message and "Traceback" not in message


def test_the_first_search_after_ready_is_compared_with_the_searches_after_it(tmp_path: Path) -> None:
    process, url = start_server(30, tmp_path)
    try:
        queries = ["read a file", "send an email", "search the web", "what time is it", "list my repositories"]
        first = first_search(url, queries, following=4)
    finally:
        stop_server(process)
    assert first["first_ms"] > 0 and first["following_p50_ms"] > 0
    assert first["ratio"] == pytest.approx(first["first_ms"] / first["following_p50_ms"], rel=0.02)


def test_bench_load_says_when_its_figures_hold_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from service.benchmarks.load import _say_errors

    row = {"concurrency": 1, "errors": 0, "requests": 10}
    _say_errors({"short": [row], "long": [row]})
    assert capsys.readouterr().err == ""
    _say_errors({"short": [row], "long": [{**row, "errors": 2356, "requests": 2365}]})
    assert capsys.readouterr().err.startswith(
        "note: 2,356 of 2,375 requests failed (non-2xx answers or socket errors) and their latencies are in the figures"
    )
