"""Where the time of a served short search goes: `toolscout serve` over real HTTP, one request at a time (issue #11).

Serves a data folder in a child process whose stages are timed (perf_counter marks around the route, the retriever,
the model's pass, the index step and its scan, lexical query and field scores, the rank stage, the search log's
row, the JSON body and the answer's send), drives it with wrk at c=1 on `bench load`'s short queries, and prints
one JSON line: the embedding floor of this process (one query alone, as `bench load` measures it), wrk's p50, the
server's CPU per request (every thread, and the event loop's thread alone, from /proc) and the median of each
stage in ms. Run it for two trees in turn, several rounds, and compare medians: this machine's speed moves by 2 ×
within minutes (docs/benchmarks-history.md, "2026-12-07: the served path's stages").

Usage: PYTHONPATH=. python bench/served_stages.py TREE DATA_FOLDER [LABEL] [SECONDS]
(TREE: the source tree to serve, e.g. this checkout or an older commit's `git archive`; DATA_FOLDER: one
`toolscout bench scale --data-root` indexed, e.g. ROOT/tools-10000, served by nothing else.)"""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# (from, to, name): the stage between two marks of one request.
STAGES = [
    ("in", "route", "ASGI stack, body, validation, dependencies"),
    ("route", "retriever", "search_tools before the retriever"),
    ("retriever", "pass_in", "query prep, hop to the embedder"),
    ("pass_in", "pass_out", "embedding pass"),
    ("index_in", "index_out", "index step (embedder's thread)"),
    ("scan_in", "scan_out", "  the scan"),
    ("lexical_in", "lexical_out", "  the lexical query"),
    ("fields_in", "fields_out", "  the field scores"),
    ("index_out", "embed_end", "hop back to the event loop"),
    ("embed_end", "rank_end", "rank"),
    ("rank_end", "payloads_out", "payloads"),
    ("retriever_out", "tools_out", "availability, metrics"),
    ("tools_out", "log_out", "search log row"),
    ("json_in", "json_out", "JSON body"),
    ("json_out", "sent", "answer sent"),
    ("sent", "out", "middleware after the answer"),
    ("in", "out", "whole request in the app"),
]


def serve(folder: str, port: str, out: str) -> None:
    """The server side: `toolscout serve` with marks; the records are written to `out` when `out.dump` appears."""
    os.environ.update(
        {
            "TOOLSCOUT_DATA_DIR": folder,
            "TOOLSCOUT_DEMO_CATALOG": "false",
            "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
            "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
            "TOOLSCOUT_EMBEDDING__CACHE_SIZE": "0",  # every search embeds its query, as in `bench load`
        }
    )
    from indexer import onnx_embedder
    from indexer.index import edge, pool_matrix
    from service import observability
    from service.cli import core, main
    from service.search import retrieval, routes

    records: list[dict[str, float]] = []
    current: dict[str, float] | None = None

    def mark(name: str) -> None:
        if current is not None and name not in current:
            current[name] = time.perf_counter()

    class Timed:
        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            nonlocal current
            if scope["type"] != "http" or scope.get("path") != "/search":
                await self.app(scope, receive, send)
                return
            current = {"in": time.perf_counter()}

            async def timed_send(message: Any) -> None:
                await send(message)
                if message["type"] == "http.response.body":
                    mark("sent")

            await self.app(scope, receive, timed_send)
            mark("out")
            records.append(current)
            current = None

    def around(owner: Any, name: str, before: str, after: str) -> None:
        original = getattr(owner, name)
        if asyncio_function(original):

            async def timed_async(*args: Any, **kwargs: Any) -> Any:
                mark(before)
                try:
                    return await original(*args, **kwargs)
                finally:
                    mark(after)

            setattr(owner, name, timed_async)
            return

        def timed(*args: Any, **kwargs: Any) -> Any:
            mark(before)
            try:
                return original(*args, **kwargs)
            finally:
                mark(after)

        setattr(owner, name, timed)

    failure = core.ExplainedStartFailure
    core.ExplainedStartFailure = lambda app, data: Timed(failure(app, data))  # type: ignore[assignment,misc]
    around(routes, "search_tools", "route", "tools_out")
    around(routes, "log_search", "log_in", "log_out")
    around(routes, "search_json", "json_in", "json_out")
    around(retrieval.Retriever, "search", "retriever", "retriever_out")
    around(retrieval.Retriever, "_index_hits_now", "index_in", "index_out")
    around(retrieval.Retriever, "_with_payloads", "payloads_in", "payloads_out")
    around(onnx_embedder.OnnxEmbedder, "embed", "pass_in", "pass_out")
    around(pool_matrix.PoolMatrix, "search_many", "scan_in", "scan_out")
    around(edge.EdgeIndex, "_query_batch", "lexical_in", "lexical_out")
    around(pool_matrix.PoolMatrix, "field_scores", "fields_in", "fields_out")
    stage_end = observability.Stage.end

    def timed_stage_end(stage: Any) -> None:
        mark(f"{stage.name}_end")
        stage_end(stage)

    observability.Stage.end = timed_stage_end  # type: ignore[method-assign]

    def dump_when_asked() -> None:
        while True:
            time.sleep(0.2)
            if os.path.exists(out + ".dump"):
                Path(out).write_text(json.dumps(records))
                os.remove(out + ".dump")

    threading.Thread(target=dump_when_asked, daemon=True).start()
    sys.exit(main(["serve", "--port", port]))


def asyncio_function(function: Any) -> bool:
    import inspect

    return inspect.iscoroutinefunction(function)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _cpu_seconds(stat: Path) -> float:
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def drive(tree: str, folder: str, label: str, seconds: int) -> dict[str, Any]:
    """Serve `folder` from `tree` with the marks, wrk c=1 for `seconds`, the stages' medians."""
    import httpx

    from service.benchmarks.load import embedding_floor_ms, wrk_run
    from service.benchmarks.search import bench_queries

    queries = bench_queries("short", 2000)
    floor = embedding_floor_ms(queries[:200])
    port, out = _free_port(), tempfile.mktemp(suffix=".json")
    process = subprocess.Popen(
        [sys.executable, __file__, "--serve", folder, str(port), out],
        env={**os.environ, "PYTHONPATH": tree},
        cwd=tree,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    process_stat, loop_stat = Path(f"/proc/{process.pid}/stat"), Path(f"/proc/{process.pid}/task/{process.pid}/stat")
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.2)
        with tempfile.TemporaryDirectory() as work:
            wrk_run(url, queries[:50], 1, 2, Path(work))
            cpu, loop = _cpu_seconds(process_stat), _cpu_seconds(loop_stat)
            result = wrk_run(url, queries, 1, seconds, Path(work))
            cpu, loop = _cpu_seconds(process_stat) - cpu, _cpu_seconds(loop_stat) - loop
        Path(out + ".dump").touch()
        while Path(out + ".dump").exists():
            time.sleep(0.1)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)
    records = json.loads(Path(out).read_text())[-result["requests"] :]
    Path(out).unlink()
    stages = {}
    for start, end, name in STAGES:
        values = [record[end] - record[start] for record in records if start in record and end in record]
        if values:
            stages[name] = round(statistics.median(values) * 1000, 3)
    requests = result["requests"]
    return {
        "label": label,
        "floor_ms": round(floor, 2),
        "p50_ms": result["p50_ms"],
        "ratio": round(result["p50_ms"] / floor, 2),
        "requests": requests,
        "cpu_ms_per_request": round(cpu * 1000 / requests, 2),
        "event_loop_cpu_ms_per_request": round(loop * 1000 / requests, 3),
        "stages_ms": stages,
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(*sys.argv[2:5])
    elif len(sys.argv) < 3:
        sys.exit(__doc__)
    else:
        tree, folder = sys.argv[1], sys.argv[2]
        sys.path.insert(0, tree)
        label = sys.argv[3] if len(sys.argv) > 3 else Path(tree).name
        print(json.dumps(drive(tree, folder, label, int(sys.argv[4]) if len(sys.argv) > 4 else 10)), flush=True)
