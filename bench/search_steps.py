"""Where a short search's time goes, in process, on a data folder (docs/benchmarks-history.md, "2026-12-06, later").

Per query (MetaTool's, as `bench load` asks them): one embedding alone, the index step alone (and its scan, its
lexical query and its field scores), the fusion of its hits, then the whole `Retriever.search` (embedding and
index step on the embedder's thread, as served) and the whole POST /search through the ASGI app. Medians in ms,
one line per pass. The steps alone run with their data in the caches; inside the search they follow the model's
pass, which evicts it, and cost more.

Usage: PYTHONPATH=. python bench/search_steps.py DATA_FOLDER [QUERIES] [PASSES] [K]
(DATA_FOLDER: one `toolscout bench scale --data-root` indexed, e.g. ROOT/tools-10000; served by nothing else:
its index is opened here. K: the searches' k, 5 by default; past search.candidates the widths grow with it, and
past search.max_k run it with TOOLSCOUT_SEARCH__MAX_K raised.)"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

STEPS = ("embed", "index", "scan", "lexical", "fields", "fuse", "search", "http")


def _environment(folder: Path) -> None:
    os.environ.update(
        {
            "TOOLSCOUT_DATA_DIR": str(folder),
            "TOOLSCOUT_DEMO_CATALOG": "false",
            "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
            "TOOLSCOUT_POLICY__RATE_LIMIT_PER_MINUTE": "0",
            "TOOLSCOUT_EMBEDDING__CACHE_SIZE": "0",  # every search embeds its query, as in `bench load`
        }
    )
    from service.settings import Settings

    os.environ["TOOLSCOUT_EMBEDDING__MODELS_DIR"] = str(Settings().models_dir.resolve())


async def measure(folder: Path, count: int, passes: int, k: int = 5) -> None:
    _environment(folder)
    import httpx

    from indexer.index.base import LEXICAL_FIELD, SearchFilter, SignalQuery
    from service.benchmarks.search import bench_queries
    from service.main import create_app
    from service.policy.callers import OPEN_CALLER
    from service.policy.service import permission_filter
    from service.search.index_steps import widths_for
    from service.usage.signal import scope_key

    app = create_app(keyless_by_design=True)
    resources = app.state.resources
    queries = bench_queries("short", count)
    async with app.router.lifespan_context(app):
        retriever, index, search = resources.retriever, resources.index, resources.settings.search
        where = permission_filter(resources, OPEN_CALLER, SearchFilter())
        scope = scope_key(OPEN_CALLER.roles)
        widths = widths_for(search, k)
        vectors = [resources.embedder.inner.embed([q])[0] for q in queries]
        sparse = [resources.encoder.encode_query(q) for q in queries]
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            for number in range(passes):
                spent: dict[str, list[float]] = {step: [] for step in STEPS}

                def timed(step: str, began: float) -> float:
                    now = time.perf_counter()
                    spent[step].append(now - began)  # noqa: B023 - this pass's lists
                    return now

                for query, vector, lexical in zip(queries, vectors, sparse, strict=True):
                    began = time.perf_counter()
                    resources.embedder.inner.embed([query])
                    began = timed("embed", began)
                    fused, hits = retriever._index_hits_now(index, [(vector, lexical)], where, widths)
                    began = timed("index", began)
                    scans = index.scan_many([([vector], where)], widths.pool, widths.part_pool)
                    began = timed("scan", began)
                    found = index.search([SignalQuery(LEXICAL_FIELD, widths.candidates, sparse=lexical)], where)
                    began = timed("lexical", began)
                    pool = frozenset(h.qualified_name for h in [*scans[0][0], *found[0]])
                    index.pool.field_scores(vector, pool, widths.candidates, where, search.centre_fields)
                    began = timed("fields", began)
                    retriever._candidates(fused, hits, [vector], k, scope)
                    began = timed("fuse", began)
                    caller = OPEN_CALLER.id
                    await retriever.search(query, k, where, caller_id=caller, boosts=resources.boosts, scope=scope)
                    began = timed("search", began)
                    response = await client.post("/search", json={"query": query, "k": k})
                    timed("http", began)
                    response.raise_for_status()
                medians = {step: round(statistics.median(values) * 1000, 3) for step, values in spent.items()}
                print(number, medians, flush=True)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    count, passes = (int(sys.argv[2]) if len(sys.argv) > 2 else 300), (int(sys.argv[3]) if len(sys.argv) > 3 else 3)
    asyncio.run(measure(Path(sys.argv[1]), count, passes, int(sys.argv[4]) if len(sys.argv) > 4 else 5))
