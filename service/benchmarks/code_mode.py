"""The code-mode scenario of `toolscout bench tokens --code-mode`: one real five-step task on the demo servers
(git, filesystem, memory), done in lazy mode with one call_tool per step and in code mode with one run_script,
counting the cl100k tokens a client puts in its context for each. The repository has fixed authors and dates
and lives at a fixed path, and the memory file starts empty, so the counts are identical on every run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx
import mcp.types as types

from service.mcp import render
from service.settings import ExecutionSettings, PolicySettings, Settings
from service.upstream.demo import (
    NODE_DEMO,
    PYTHON_DEMO,
    ensure_node_packages,
    ensure_python_packages,
    node_entry,
    toolchain_dir,
)

FOLDER = Path(tempfile.gettempdir()) / "toolscout-code-mode-bench"
COMMITS = [
    ("notes.md", "# Notes\n\n- ship the search API\n"),
    ("hello.py", 'print("hello")\n'),
    ("notes.md", "# Notes\n\n- ship the search API\n- measure /execute overhead\n"),
    ("notes.md", "# Notes\n\n- ship the search API\n- measure /execute overhead\n- add code mode\n"),
]
TASK = "Find the last three commits that touched notes.md, read it, and store a summary in memory."
SCRIPT = """const repo = "{repo}";
const log = await tools.git__git_log({{repo_path: repo, max_count: 10}});
const commits = log.split("\\nCommit: ").filter(c => c.includes("notes.md")).slice(0, 3);
const last = await tools.git__git_show({{repo_path: repo, revision: "HEAD"}});
const text = await tools.filesystem__read_text_file({{path: repo + "/notes.md"}});
const content = typeof text === "string" ? text : text.content;
const items = content.split("\\n").filter(l => l.startsWith("- ")).map(l => l.slice(2));
const summary = `notes.md: ${{items.length}} items (${{items.join("; ")}}); touched by ${{commits.length}} commits`;
await tools.memory__create_entities({{entities: [{{name: "notes.md", entityType: "file", observations: [summary]}}]}});
const stored = await tools.memory__open_nodes({{names: ["notes.md"]}});
return {{summary, stored: stored.entities.length, last_change: last.split("\\n").slice(-4).join("\\n")}};"""


def make_repo(folder: Path) -> Path:
    """A repository whose notes.md was touched by three of four commits, with fixed authors and dates."""
    repo = folder / "repo"
    repo.mkdir(parents=True)
    for i, (name, text) in enumerate(COMMITS):
        (repo / name).write_text(text, encoding="utf-8")
        date = f"2026-01-0{i + 1}T12:00:00+00:00"
        env = os.environ | {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        for args in (["add", name], ["commit", "-q", "-m", f"Update {name} ({i + 1})"]):
            identity = ["-c", "user.name=Toolscout Bench", "-c", "user.email=bench@toolscout.invalid"]
            branch = ["-c", "init.defaultBranch=main"]
            if i == 0 and args[0] == "add":
                subprocess.run(["git", *branch, "init", "-q"], cwd=repo, check=True, capture_output=True)
            subprocess.run(["git", *identity, *args], cwd=repo, env=env, check=True, capture_output=True)
    return repo


async def _servers(folder: Path, repo: Path) -> dict[str, Any]:
    toolchain = toolchain_dir(Settings())  # the demo servers' installs, shared with the service
    python = await ensure_python_packages(
        toolchain, [p for p, _ in PYTHON_DEMO.values()], [m for _, m in PYTHON_DEMO.values()]
    )
    modules = await ensure_node_packages(toolchain, list(NODE_DEMO.values()))

    def node(key: str, *args: str, **extra: Any) -> dict[str, Any]:
        return {"command": "node", "args": [str(node_entry(modules, NODE_DEMO[key])), *args], **extra}

    return {
        "git": {"command": python, "args": ["-m", "mcp_server_git", "--repository", str(repo)]},
        "filesystem": node("filesystem", str(repo)),
        "memory": node("memory", env={"MEMORY_FILE_PATH": str(folder / "memory.jsonl")}),
    }


def _text(result: types.CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))


def _turns(tools_list: int, steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Context tokens (what the client keeps) and input tokens (the context re-read at each model turn)."""
    context, billed = tools_list, 0
    for step in steps:
        billed += context  # the model reads the context, then emits this call
        context += step["call_tokens"] + step["result_tokens"]
    billed += context  # the last turn, which answers
    return {"steps": steps, "context_tokens": context, "input_tokens": billed, "model_turns": len(steps) + 1}


def _step(name: str, arguments: dict[str, Any], result: types.CallToolResult) -> dict[str, Any]:
    return {
        "tool": name,
        "call_tokens": render.count_tokens({"name": render.CALL, "arguments": {"name": name, "arguments": arguments}})
        if name != render.RUN
        else render.count_tokens({"name": name, "arguments": arguments}),
        "result_tokens": render.count_tokens(_text(result)),
        "is_error": bool(result.is_error),
    }


async def code_mode_scenario() -> dict[str, Any]:
    """Run the task both ways on real servers; the report is deterministic."""
    from indexer.embedding import HashingEmbedder
    from service.main import create_app

    shutil.rmtree(FOLDER, ignore_errors=True)
    repo = make_repo(FOLDER)
    servers_file = FOLDER / "servers.json"
    servers_file.write_text(json.dumps({"mcpServers": await _servers(FOLDER, repo)}), encoding="utf-8")
    settings = Settings(
        data_dir=FOLDER / "data",
        demo_catalog=False,
        policy=PolicySettings(rate_limit_per_minute=0),
        execution=ExecutionSettings(servers_file=servers_file, demo_servers=False, startup_wait_seconds=120),
    )
    app = create_app(settings, embedder=HashingEmbedder(), keyless_by_design=True)
    lazy_calls = [
        ("git__git_log", {"repo_path": str(repo), "max_count": 10}),
        ("git__git_show", {"repo_path": str(repo), "revision": "HEAD"}),
        ("filesystem__read_text_file", {"path": str(repo / "notes.md")}),
    ]
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost", timeout=120) as http:
            lazy = []
            for name, arguments in lazy_calls:
                body = (await http.post("/execute", json={"name": name, "arguments": arguments})).json()
                lazy.append(_step(name, arguments, render.execution_result(body)))
            items = "ship the search API; measure /execute overhead; add code mode"
            summary = f"notes.md: 3 items ({items}); touched by 3 commits"
            entity = {"name": "notes.md", "entityType": "file", "observations": [summary]}
            for name, arguments in [
                ("memory__create_entities", {"entities": [entity]}),
                ("memory__open_nodes", {"names": ["notes.md"]}),
            ]:
                body = (await http.post("/execute", json={"name": name, "arguments": arguments})).json()
                lazy.append(_step(name, arguments, render.execution_result(body)))
            (FOLDER / "memory.jsonl").unlink(missing_ok=True)
            arguments = {"script": SCRIPT.format(repo=repo)}
            run = (await http.post("/run", json=arguments)).json()
            code = [_step(render.RUN, arguments, render.run_result(run))]
    tools_list = render.count_tokens(render.wire_list(render.mode_tools("lazy", run_script=True)))
    report = {
        "task": TASK,
        "tools_list_tokens": tools_list,
        "lazy": _turns(tools_list, lazy),
        "code_mode": _turns(tools_list, code) | {"calls_in_script": len(run.get("calls") or [])},
    }
    for key in ("context_tokens", "input_tokens"):
        report[f"{key}_saving_pct"] = round(100 * (1 - report["code_mode"][key] / report["lazy"][key]), 1)
    return report
