"""`toolscout bench learning`: does learning from use help, and does it leave the rest alone?

On a labelled dev set (catalog + queries), the queries are split in two: a history half and a test half.
Agents replay the history half against the real search, and their calls become a synthetic execution log:
  - most agents trust the top result; when it is the wrong tool the call fails (wrong arguments or a tool
    error) and the agent then calls the right one from the top 5 - so tools that attract the wrong
    requests keep failing, and the right ones are used;
  - one agent, `specialist`, owns the requests of a few tools (a fixed subset of the catalog) and makes
    most of them, so those tools become its habit.
Every agent holds the same role, so all of them learn and read in one permission scope (popularity and
reliability are learned per scope, as a deployment's agents of one role share them).
The test half is searched once before the log exists, with learning on (nothing may move), then the log
goes through the real statistics refresh and the test half is searched again with the learned boosts.
Reported: R@1 and MRR before/after on the test queries the history touches (the caller's habit covers a
relevant tool, or a tool that keeps failing ranks above the first relevant one in the top 5), on the
others, and on all of them; and how often a correct first result without history stayed first."""

from __future__ import annotations

import argparse
import asyncio
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
from service.benchmarks import save_report
from service.benchmarks.arguments import positive_int
from service.benchmarks.datasets import EVAL, require_files
from service.benchmarks.usage_replay import replay_usage
from service.catalog.files import CatalogFile, load_catalog_file
from service.catalog.service import register_tools
from service.cli.database import print_table
from service.db.models import Execution
from service.resources import Resources, build_resources, close_resources, start_resources
from service.search.evaluation import Query, load_queries, query_metrics
from service.search.service import start_search
from service.settings import Settings
from service.usage.learning import boosts_for, learning_state, refresh_stats
from service.usage.signal import scope_key

DEPTH = 100
SPECIALIST = "specialist"
GENERALISTS = [f"agent-{i}" for i in range(8)]
NEWCOMER = "newcomer"  # a caller without history: sees popularity and reliability only
AGENTS = scope_key(["agent"])  # the one permission scope every agent calls and searches in
GROUPS = ("affected", "affected: caller habit", "affected: failing tool", "unaffected", "all")


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("learning", help="replay a synthetic usage log; report R@1/MRR before and after")
    parser.add_argument(
        "--catalog", type=Path, default=EVAL / "metatool" / "catalog.jsonl", help="JSON Lines (default: MetaTool's)"
    )
    parser.add_argument(
        "--queries",
        type=Path,
        default=EVAL / "metatool" / "queries.jsonl",
        help="labelled queries (default: MetaTool's)",
    )
    parser.add_argument(
        "--max-queries",
        type=positive_int,
        default=4000,
        help="queries sampled, half history and half test (default 4000)",
    )
    parser.add_argument(
        "--specialist-share", type=float, default=0.1, help="share of tools the specialist owns (default 0.1)"
    )
    parser.add_argument(
        "--trust-top", type=float, default=0.7, help="how often an agent calls the first result (default 0.7)"
    )
    parser.add_argument("--seed", type=int, default=0, help="of the sample and the agents' choices")
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.add_argument(
        "--signal",
        choices=("boosts", "usage"),
        default="boosts",
        help="boosts (the default): popularity/reliability/habit (this module); usage: the usage vectors, per dev set",
    )
    parser.add_argument(
        "--sets",
        nargs="+",
        default=["metatool", "sealtools"],
        help="dev sets of --signal usage (default metatool sealtools)",
    )
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
    boosts = (lambda c, scope, names: boosts_for(resources, c, scope, names)) if learned else None
    outcome = await resources.retriever.search(
        text, DEPTH, SearchFilter(), caller_id=caller, boosts=boosts, scope=AGENTS
    )
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
                "scope": AGENTS,
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
        await start_search(resources)
        try:
            started = time.perf_counter()
            await register_tools(resources, catalog.tools)
            index_seconds = time.perf_counter() - started
            rng = random.Random(args.seed + 2)
            history = []
            for query in split.history:
                caller = caller_of(query, split, rng)
                history.append((query, caller, await ranking(resources, query.text, caller, learned=False)))
            callers = {q.qid: caller_of(q, split, rng) if q.relevant & split.owned else NEWCOMER for q in split.test}
            # Learning on but nothing learned yet: no ranking may move.
            baseline: dict[str, list[str]] = {}
            unmoved = 0
            for query in split.test:
                baseline[query.qid] = await ranking(resources, query.text, callers[query.qid], learned=False)
                empty = await ranking(resources, query.text, callers[query.qid], learned=True)
                unmoved += int(empty == baseline[query.qid])
            log = simulate(history, to_id, args.trust_top, args.seed)
            async with resources.session() as session:
                await session.execute(insert(Execution), log)
                await session.commit()
            await refresh_stats(resources)
            learned = learning_state(resources).snapshot.scopes.get(AGENTS, {})
            rows: dict[str, list[dict[str, float]]] = defaultdict(list)
            kept = lost = 0
            for query in split.test:
                caller, before = callers[query.qid], baseline[query.qid]
                after = await ranking(resources, query.text, caller, learned=True)
                ids_before = [to_id.get(n, n) for n in before]
                ids_after = [to_id.get(n, n) for n in after]
                metrics = (
                    query_metrics(ids_before, query.relevant),
                    query_metrics(ids_after, query.relevant),
                )
                for group in touched_by(query, caller, before, ids_before, resources, to_id):
                    rows[group].append(metrics[0])
                    rows[f"{group}/after"].append(metrics[1])
                if before and before[0] not in learned and ids_before[0] in query.relevant:
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
        "tools_with_history": len(learned),
        "index_seconds": round(index_seconds, 1),
        "unmoved_without_history": {"queries": len(split.test), "unmoved": unmoved},
        "groups": {
            group: {"before": _summary(rows[group]), "after": _summary(rows[f"{group}/after"])} for group in GROUPS
        },
        "new_correct_top1": {"kept": kept, "lost": lost},
    }


def touched_by(
    query: Query,
    caller: str,
    before: list[str],
    ids_before: list[str],
    resources: Resources,
    to_id: dict[str, str],
) -> list[str]:
    """The groups of a test query: touched by the history when the caller's habit covers a relevant tool, or
    when a tool that keeps failing ranks above the first relevant one within the top 5."""
    snapshot = learning_state(resources).snapshot
    first = next((i for i, name in enumerate(ids_before) if name in query.relevant), len(before))
    boosts = boosts_for(resources, caller, AGENTS, before[:5])
    habit = any(to_id.get(t, t) in query.relevant for t in snapshot.habits.get(caller, {}))
    failing = any(boosts[name].get("reliability", 0.0) < -0.01 for name in before[: min(first, 5)])
    groups = ["all", "affected" if habit or failing else "unaffected"]
    return groups + (["affected: caller habit"] if habit else []) + (["affected: failing tool"] if failing else [])


def _adapter_columns(row: dict) -> dict[str, str]:
    """The usage signal with the query adapter on top (usage/adapter.py): its figures, training and cost."""
    adapted, report = row.get("after with the adapter"), row.get("adapter")
    if adapted is None or report is None:
        return {}
    trained = report["trained"] or {}
    return {
        **{f"{m} +adapter": f"{adapted[m]:.3f}" for m in ("R@1", "R@5", "MRR")},
        "adapter trained": f"{trained.get('queries', 0)} q {trained.get('seconds', 0.0):.1f} s"
        + ("" if trained.get("kept") else " (identity)"),
        "ms/search with/without": "/".join(f"{x:.2f}" for x in report["search_ms_with_without"]),
        "KB": str(report["kb_per_scope"]),
    }


def run_usage(args: argparse.Namespace) -> int:
    """The usage signal on each dev set: R@1, R@5, MRR on the test half before and after the replayed log."""
    results, table = [], []
    require_files(
        [EVAL / name / kind for name in args.sets for kind in ("catalog.jsonl", "queries.jsonl")],
        "the usage signal is measured on those dev sets only",
    )
    for name in args.sets:
        result = asyncio.run(
            replay_usage(EVAL / name / "catalog.jsonl", EVAL / name / "queries.jsonl", args.max_queries, args.seed)
        )
        results.append(result)
        for split in ("by query", "by tool"):
            row = result[split]
            before, after = row["before"], row["after"]
            table.append(
                {
                    "set": name,
                    "split": split,
                    "history": row["history"],
                    "calls": row["calls"],
                    "test": row["test"],
                    **{f"{m} before": f"{before[m]:.3f}" for m in ("R@1", "R@5", "MRR")},
                    **{f"{m} after": f"{after[m]:.3f}" for m in ("R@1", "R@5", "MRR")},
                    "delta R@1": f"{after['R@1'] - before['R@1']:+.3f}",
                    **_adapter_columns(row),
                    "moved elsewhere": row["moved_in_other_scope"],
                }
            )
    print_table(table, list(table[0]))
    save_report(args.json_out, results)
    return 0


def run(args: argparse.Namespace) -> int:
    if args.signal == "usage":
        return run_usage(args)
    require_files([args.catalog, args.queries], "pass --catalog FILE --queries FILE (JSON Lines, as toolscout eval)")
    result = asyncio.run(replay(args))
    print(
        f"{result['tools']} tools; {result['history_queries']} history queries replayed as "
        f"{result['executions']} calls {result['statuses']}; {result['tools_with_history']} tools with "
        f"history; specialist owns {result['specialist_tools']} tools; "
        f"{result['test_queries']} test queries\n"
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
    unmoved, kept = result["unmoved_without_history"], result["new_correct_top1"]
    print(f"\nno history yet (learning on): {unmoved['unmoved']} of {unmoved['queries']} rankings unchanged")
    print(f"correct first results without history that stayed first: {kept['kept']} of {kept['kept'] + kept['lost']}")
    save_report(args.json_out, result)
    return 0
