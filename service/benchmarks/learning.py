"""`toolscout bench learning`: does learning from use help, and does it leave the rest alone?

On a labelled dev set (catalog + queries), the queries are split in two: a history half and a test half.
Agents replay the history half against the real search, and their calls become a synthetic execution log:
  - most agents trust the top result; when it is the wrong tool the call fails (wrong arguments or a tool
    error) and the agent then calls the right one from the top 5 - so tools that attract the wrong
    requests keep failing, and the right ones are used;
  - one agent, `specialist`, owns the requests of a few tools (a fixed subset of the catalog) and makes
    most of them, so those tools become its habit.
The log goes through the real statistics refresh, then the test half is searched again with the learned
boosts. Reported: R@1 and MRR before/after on the test queries the history touches (a tool with history
among the relevant tools or the first ten results), on the others, and on all of them; and how often a
correct first result without history stayed first."""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import insert

from indexer.index.base import SearchFilter
from service.catalog import register_tools
from service.catalog_files import CatalogFile, load_catalog_file
from service.cli.database import print_table
from service.db.models import Execution
from service.evaluation import Query, load_queries, query_metrics
from service.learning import boosts_for, learning_state, refresh_stats
from service.resources import Resources, build_resources, close_resources, start_resources
from service.settings import Settings

EVAL = Path(__file__).resolve().parents[2].parent / "shared" / "eval"
DEPTH = 100
SPECIALIST = "specialist"
GENERALISTS = [f"agent-{i}" for i in range(8)]
NEWCOMER = "newcomer"  # a caller without history: sees popularity and reliability only


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("learning", help="replay a synthetic usage log; R@1/MRR before and after")
    parser.add_argument("--catalog", type=Path, default=EVAL / "metatool" / "catalog.jsonl")
    parser.add_argument("--queries", type=Path, default=EVAL / "metatool" / "queries.jsonl")
    parser.add_argument(
        "--max-queries", type=int, default=4000, help="queries sampled (half history, half test)"
    )
    parser.add_argument(
        "--specialist-share", type=float, default=0.1, help="share of tools the specialist owns"
    )
    parser.add_argument(
        "--trust-top", type=float, default=0.7, help="how often an agent calls the first result"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, dest="json_out")
    parser.set_defaults(func=run)


@dataclass
class Split:
    history: list[Query]
    test: list[Query]
    owned: set[str]  # catalog ids of the specialist's tools


def split_queries(queries: list[Query], catalog: CatalogFile, share: float, seed: int) -> Split:
    rng = random.Random(seed)
    shuffled = queries[:]
    rng.shuffle(shuffled)
    half = len(shuffled) // 2
    ids = sorted(set(catalog.ids.values()))
    owned = set(rng.sample(ids, max(1, int(len(ids) * share))))
    return Split(shuffled[:half], shuffled[half:], owned)


def caller_of(query: Query, split: Split, rng: random.Random) -> str:
    """The specialist makes most requests for its tools; generalists make the rest."""
    if query.relevant & split.owned and rng.random() < 0.9:
        return SPECIALIST
    return rng.choice(GENERALISTS)


async def ranking(resources: Resources, text: str, caller: str, learned: bool) -> list[str]:
    assert resources.retriever is not None
    boosts = (lambda c, names: boosts_for(resources, c, names)) if learned else None
    outcome = await resources.retriever.search(text, DEPTH, SearchFilter(), caller_id=caller, boosts=boosts)
    return [r.name for r in outcome.results]


def simulate(
    history: list[tuple[Query, str, list[str]]], to_id: dict[str, str], trust_top: float, seed: int
) -> list[dict[str, Any]]:
    """Execution rows of agents working through the history queries with the baseline ranking."""
    rng = random.Random(seed + 1)
    now = datetime.now(UTC) - timedelta(minutes=5)
    rows: list[dict[str, Any]] = []

    def call(caller: str, name: str, status: str, at: datetime, error: str | None = None) -> None:
        rows.append(
            {
                "id": str(uuid.uuid4()),
                "caller": caller,
                "tool": name,
                "server_id": name.split("__")[0],
                "search_id": None,
                "arguments_digest": "0" * 64,
                "status": status,
                "error_class": error,
                "duration_ms": rng.uniform(50, 400),
                "input_tokens": 30,
                "output_tokens": 200,
                "started_at": at,
                "finished_at": at + timedelta(milliseconds=400),
            }
        )

    for query, caller, ranked in history:
        at = now - timedelta(seconds=rng.uniform(0, 14 * 86400))
        top5 = ranked[:5]
        right = next((name for name in top5 if to_id.get(name, name) in query.relevant), None)
        pick = top5[0] if (rng.random() < trust_top or right is None) and top5 else right
        if pick is None:
            continue
        if to_id.get(pick, pick) in query.relevant:
            call(caller, pick, "ok" if rng.random() < 0.97 else "tool_error", at, None)
            continue
        # The wrong tool: usually the call fails, and the agent moves on to the right one if it saw it.
        wrong = rng.random()
        if wrong < 0.5:
            call(caller, pick, "invalid_arguments", at, "InvalidArguments")
        elif wrong < 0.85:
            call(caller, pick, "tool_error", at, "ToolError")
        else:
            call(caller, pick, "ok", at)
        if right is not None:
            call(caller, right, "ok", at + timedelta(seconds=5))
    return rows


def _summary(rows: list[dict[str, float]]) -> dict[str, float]:
    n = len(rows)
    return {
        "queries": n,
        "R@1": round(sum(r["recall@1"] for r in rows) / n, 4) if n else 0.0,
        "MRR": round(sum(r["mrr"] for r in rows) / n, 4) if n else 0.0,
    }


async def replay(args: argparse.Namespace) -> dict[str, Any]:
    catalog = load_catalog_file(args.catalog)
    queries = load_queries(args.queries, args.max_queries, args.seed)
    split = split_queries(queries, catalog, args.specialist_share, args.seed)
    to_id = catalog.ids
    with tempfile.TemporaryDirectory(prefix="toolscout-learning-") as tmp:
        settings = Settings(data_dir=Path(tmp), demo_catalog=False)
        settings.learning.refresh_lag_seconds = 0.0
        resources = build_resources(settings)
        await start_resources(resources)
        try:
            started = time.perf_counter()
            await register_tools(resources, catalog.tools)
            index_seconds = time.perf_counter() - started
            rng = random.Random(args.seed + 2)
            history = []
            for query in split.history:
                caller = caller_of(query, split, rng)
                history.append((query, caller, await ranking(resources, query.text, caller, learned=False)))
            log = simulate(history, to_id, args.trust_top, args.seed)
            async with resources.session() as session:
                await session.execute(insert(Execution), log)
                await session.commit()
            await refresh_stats(resources)
            known = set(learning_state(resources).snapshot.tools)
            habits = learning_state(resources).snapshot.habits
            rows: dict[str, list[dict[str, float]]] = defaultdict(list)
            kept = lost = 0
            for query in split.test:
                caller = SPECIALIST if query.relevant & split.owned and rng.random() < 0.9 else NEWCOMER
                before = await ranking(resources, query.text, caller, learned=False)
                after = await ranking(resources, query.text, caller, learned=True)
                ids_before = [to_id.get(n, n) for n in before]
                ids_after = [to_id.get(n, n) for n in after]
                m_before, m_after = (
                    query_metrics(ids_before, query.relevant),
                    query_metrics(ids_after, query.relevant),
                )
                relevant_names = {n for n in before if to_id.get(n, n) in query.relevant}
                touched = (relevant_names | set(before[:10])) & (known | set(habits.get(caller, {})))
                group = "affected" if touched else "unaffected"
                for name in (group, "all"):
                    rows[f"{name}/before"].append(m_before)
                    rows[f"{name}/after"].append(m_after)
                if before and before[0] not in known and ids_before[0] in query.relevant:
                    kept += int(after[0] == before[0])
                    lost += int(after[0] != before[0])
        finally:
            await close_resources(resources)
    statuses: dict[str, int] = defaultdict(int)
    for row in log:
        statuses[row["status"]] += 1
    return {
        "catalog": str(args.catalog),
        "tools": len(catalog.tools),
        "history_queries": len(split.history),
        "test_queries": len(split.test),
        "specialist_tools": len(split.owned),
        "executions": len(log),
        "statuses": dict(statuses),
        "tools_with_history": len(known),
        "index_seconds": round(index_seconds, 1),
        "groups": {
            group: {"before": _summary(rows[f"{group}/before"]), "after": _summary(rows[f"{group}/after"])}
            for group in ("affected", "unaffected", "all")
        },
        "new_correct_top1": {"kept": kept, "lost": lost},
    }


def run(args: argparse.Namespace) -> int:
    result = asyncio.run(replay(args))
    print(
        f"{result['tools']} tools; {result['history_queries']} history queries replayed as "
        f"{result['executions']} "
        f"calls {result['statuses']}; {result['tools_with_history']} tools with history; "
        f"specialist owns {result['specialist_tools']} tools; {result['test_queries']} test queries\n"
    )
    table = []
    for group, values in result["groups"].items():
        before, after = values["before"], values["after"]
        table.append(
            {
                "test queries": group,
                "n": before["queries"],
                "R@1 before": f"{before['R@1']:.3f}",
                "R@1 after": f"{after['R@1']:.3f}",
                "delta R@1": f"{after['R@1'] - before['R@1']:+.3f}",
                "MRR before": f"{before['MRR']:.3f}",
                "MRR after": f"{after['MRR']:.3f}",
                "delta MRR": f"{after['MRR'] - before['MRR']:+.3f}",
            }
        )
    print_table(table, list(table[0]))
    kept = result["new_correct_top1"]
    print(
        f"\ncorrect first results without history that stayed first: {kept['kept']} of "
        f"{kept['kept'] + kept['lost']}"
    )
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=2))
    return 0
