"""The answers of a tree's search, to compare a change against the code before it (issue #11's rule: a speed change
keeps the top 10, names and scores, of 300 short and 300 long bench queries).

Opens a data folder in process with one ONNX thread (with two, the pass's form and so the vectors of one commit
differ between runs), searches each query with k=10 through `Retriever.search` as the open caller, and writes one
JSON line per query: the query, and its top 10 as [name, score] pairs. Run it from each tree on copies of the same
folder, then compare the files (`cmp`, or `diff` for which queries moved).

Usage: PYTHONPATH=. python bench/same_answers.py DATA_FOLDER OUT_JSONL [COUNT]"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path


async def answers(folder: Path, out: Path, count: int) -> None:
    os.environ.update(
        {
            "TOOLSCOUT_DATA_DIR": str(folder),
            "TOOLSCOUT_DEMO_CATALOG": "false",
            "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
            "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
            "TOOLSCOUT_EMBEDDING__CACHE_SIZE": "0",
            "TOOLSCOUT_EMBEDDING__THREADS": "1",
        }
    )
    from indexer.index.base import SearchFilter
    from service.benchmarks.search import bench_queries
    from service.main import create_app
    from service.policy.callers import OPEN_CALLER
    from service.policy.service import permission_filter
    from service.settings import Settings
    from service.usage.signal import scope_key

    os.environ["TOOLSCOUT_EMBEDDING__MODELS_DIR"] = str(Settings().models_dir.resolve())
    app = create_app(keyless_by_design=True)
    resources = app.state.resources
    async with app.router.lifespan_context(app):
        where = permission_filter(resources, OPEN_CALLER, SearchFilter())
        scope = scope_key(OPEN_CALLER.roles)
        with out.open("w") as file:
            for kind in ("short", "long"):
                for query in bench_queries(kind, count):
                    outcome = await resources.retriever.search(
                        query, 10, where, caller_id=OPEN_CALLER.id, boosts=resources.boosts, scope=scope
                    )
                    top = [[result.name, result.score] for result in outcome.results]
                    file.write(json.dumps({"kind": kind, "query": query, "top": top}) + "\n")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    asyncio.run(answers(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]) if len(sys.argv) > 3 else 300))
