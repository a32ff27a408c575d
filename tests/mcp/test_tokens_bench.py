"""`toolscout bench tokens`: deterministic JSON for a catalog and its profiles, and live timings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest
from fastapi import FastAPI

from service.benchmarks.tokens import list_tokens, load_catalog, markdown_table
from service.cli import main
from tests.mcp.conftest import CATALOGS, toolscout_command

PROFILES = CATALOGS / "profiles.yaml"


def run_bench(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["bench", "tokens", *args]) == 0
    return capsys.readouterr().out


def test_the_report_is_identical_on_every_run_and_covers_modes_and_profiles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    first = run_bench(
        capsys, "--catalog", str(CATALOGS), "--profiles", str(PROFILES), "--json", str(tmp_path / "a")
    )
    second = run_bench(capsys, "--catalog", str(CATALOGS), "--profiles", str(PROFILES))
    assert first == second == (tmp_path / "a").read_text()
    report = json.loads(first)
    everything = report["all"]
    assert (everything["tools"], everything["servers"]) == (85, 8)
    modes = everything["modes"]
    # Four meta-tools and run_script (code mode); full mode lists run_script after the catalog.
    assert modes["full"]["tools"] == 86 and modes["lazy"]["tools"] == modes["dynamic"]["tools"] == 5
    assert modes["grouped"]["tools"] == 5 + 8
    assert modes["lazy"]["tokens"] <= 1000 < modes["full"]["tokens"]
    assert modes["lazy"]["saving_pct"] == round(
        100 * (1 - modes["lazy"]["tokens"] / modes["full"]["tokens"]), 1
    )
    assert everything["search_result"]["k"] == 5
    assert 0 < everything["search_result"]["typical_tokens"] <= everything["search_result"]["p90_tokens"]
    assert set(report["profiles"]) == {"assistant", "coding"}
    coding = report["profiles"]["coding"]
    assert coding["tools"] == 12 + 26 + 14 and coding["modes"]["lazy"]["tools"] == 5  # + git__git_status
    table = run_bench(capsys, "--catalog", str(CATALOGS), "--profiles", str(PROFILES), "--markdown")
    assert "| profile `coding` (52 tools) |" in table


def test_the_default_catalog_is_the_shipped_demo_and_jsonl_catalogs_work(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert json.loads(run_bench(capsys))["all"]["tools"] == 85
    lines = [
        {
            "id": f"t{i}",
            "name": f"tool_{i}",
            "server": f"Domain {i % 50}/Area",
            "description": f"Does thing {i}",
            "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}},
        }
        for i in range(1500)
    ]
    catalog = tmp_path / "big.jsonl"
    catalog.write_text("\n".join(json.dumps(line) for line in lines))
    report = json.loads(run_bench(capsys, "--catalog", str(catalog), "-k", "3"))
    assert report["catalog"] == str(catalog) and report["all"]["tools"] == 1500
    assert report["all"]["search_result"]["k"] == 3
    # Lazy costs the same whatever the catalog size.
    small = load_catalog(CATALOGS)
    assert report["all"]["modes"]["lazy"]["tokens"] == list_tokens("lazy", small)[1] <= 1000


async def test_live_timings_go_through_the_front_end(live_api: tuple[str, FastAPI], tmp_path: Path) -> None:
    env = {**os.environ, "TOOLSCOUT_FRONTEND__API_URL": live_api[0]}
    result = await anyio.run_process(
        [
            *toolscout_command(),
            "bench",
            "tokens",
            "--live-timings",
            "--rounds",
            "2",
            "--call-tool",
            "probe__echo",
            "--call-arguments",
            '{"text": "timed"}',
        ],
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    live = json.loads(result.stdout)["live"]
    assert live["api_url"] == live_api[0]
    for mode in ("lazy", "grouped", "full", "dynamic"):
        assert live[mode]["tools_list"]["n"] == live[mode]["search_tools"]["n"] == 2
        assert live[mode]["call_tool"]["tool"] == "probe__echo" and live[mode]["call_tool"]["median_ms"] > 0
    # A call that fails is not timed: its figures would be those of the error.
    failing = await anyio.run_process(
        [*toolscout_command(), "bench", "tokens", "--live-timings", "--call-tool", "probe__nope"],
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert failing.returncode == 1 and failing.stdout == b""
    assert failing.stderr.decode().splitlines()[-1].startswith(
        "error: call_tool(probe__nope) fails, so there is nothing to time: Not found: No tool named 'probe__nope'"
    )


def test_the_markdown_table_carries_the_live_timings_and_code_mode(capsys: pytest.CaptureFixture[str]) -> None:
    report = {**json.loads(run_bench(capsys)), "live": {"api_url": "http://api", "rounds": 3}}
    for mode in ("lazy", "grouped", "full", "dynamic"):
        timing = {"n": 3, "median_ms": 1.5, "p95_ms": 2.0}
        report["live"][mode] = {"tools_list": timing, "search_tools": timing, "call_tool": {"tool": "t__x", **timing}}
    report["live"]["full"].pop("call_tool")
    table = markdown_table(report).splitlines()
    assert "Through the front end against http://api, 3 rounds (median / p95 ms):" in table
    assert "| lazy | 1.5 / 2.0 | 1.5 / 2.0 | 1.5 / 2.0 (t__x) |" in table
    assert "| full | 1.5 / 2.0 | 1.5 / 2.0 | – |" in table
    report["code_mode"] = {
        "task": "Five steps.",
        "lazy": {"model_turns": 6, "context_tokens": 1195, "input_tokens": 5486},
        "code_mode": {"model_turns": 2, "context_tokens": 841, "input_tokens": 1336},
        "context_tokens_saving_pct": 29.6,
        "input_tokens_saving_pct": 75.6,
    }
    table = markdown_table(report).splitlines()
    assert table[-2:] == [
        "| lazy, one call per step | 6 | 1,195 | 5,486 |",
        "| code mode, one script | 2 | 841 (29.6% less) | 1,336 (75.6% less) |",
    ]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--call-arguments", "{x"], "argument --call-arguments: not JSON"),
        (["--call-arguments", "[1]"], "argument --call-arguments: expected a JSON object of arguments, got '[1]'"),
        (["--rounds", "0"], "argument --rounds: expected a whole number of at least 1, got '0'"),
        (["-k", "many"], "argument -k: expected a whole number of at least 1, got 'many'"),
    ],
)
def test_wrong_arguments_are_refused_before_anything_runs(
    args: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "tokens", "--live-timings", *args])
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith(f"toolscout bench tokens: error: {said}")
