"""`toolscout eval`: retrieval quality of a labelled set (service/search/evaluation.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from service.benchmarks.arguments import positive_int
from service.cli.core import _kept_and_lost, fail
from service.cli.terminal import printable
from service.errors import BadRequest, ToolscoutError, counted, verb


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    evaluate = subparsers.add_parser("eval", help="measure retrieval quality (recall, nDCG, MRR) on labelled queries")
    evaluate.add_argument(
        "--catalog", type=Path, required=True, help="the tools, a JSON Lines file (or an MCP tools/list JSON)"
    )
    evaluate.add_argument(
        "--queries", type=Path, required=True, help="JSON Lines of {qid, query, relevant: [tool ids], category?}"
    )
    evaluate.add_argument(
        "--max-queries", type=positive_int, default=None, help="a random sample of this many queries"
    )
    evaluate.add_argument("--seed", type=int, default=0, help="seed of that sample (default 0)")
    evaluate.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the figures here")
    evaluate.set_defaults(func=cmd_eval)


def _eval_warnings(result: dict[str, Any]) -> list[str]:
    """What the figures of an evaluation could not count as the file says: relevant ids no catalog line has or
    whose tool was refused, queries without relevant ids, qids on several lines, results mapped to no id."""
    lines = []
    if result["unknown_relevant"]:
        naming = result["queries_with_unknown_relevant"]
        shown = ", ".join(result["unknown_relevant"][:10])
        lines.append(f"relevant ids that no catalog line has (the first 20 kept): {shown} "
                     f"({counted(result['unknown_relevant_ids'], 'id')}, "
                     f"named by {counted(naming, 'query', 'queries')}, "
                     f"which {verb(naming, 'loses', 'lose')} that recall)")
    if result["rejected_relevant"]:
        lines.append(f"relevant tools the registration refused, named by "
                     f"{counted(result['queries_with_rejected_relevant'], 'query', 'queries')} (the first 20):")
        lines += [f"  {r['id']} ({r['tool']}): {r['reason']}" for r in result["rejected_relevant"]]
    if unscored := result["unscored_queries"]:
        lines.append(f"{counted(unscored, 'query', 'queries')} {verb(unscored, 'has', 'have')} an empty `relevant` and "
                     f"{verb(unscored, 'is', 'are')} not scored: "
                     + ", ".join(result["unscored_qids"][:10]))
    if repeats := result["duplicate_qid_lines"]:
        lines.append(f"{counted(repeats, 'line')} {verb(repeats, 'repeats', 'repeat')} an earlier line's qid "
                     "(each is scored): "
                     + ", ".join(result["duplicate_qids"][:10]))
    if result["unmapped_results"]:
        lines.append("results that map to no catalog id (a fault of the evaluation): "
                     + ", ".join(result["unmapped_results"][:10]))
    return lines


def _progress(stage: str, done: int, total: int) -> None:
    print(f"\r{stage} {done}/{total}", end="", file=sys.stderr, flush=True)


def cmd_eval(args: argparse.Namespace) -> int:
    from service.search.evaluation import evaluate

    # A count of the queries run, on a terminal only: 21,041 queries ran for minutes without a sign of life.
    shown = sys.stderr.isatty()
    try:
        result = asyncio.run(evaluate(args.catalog, args.queries, max_queries=args.max_queries, seed=args.seed,
                                      progress=_progress if shown else None))
    except ToolscoutError as exc:
        return fail(exc)
    finally:
        if shown:
            print("\r\033[K", end="", file=sys.stderr, flush=True)
    keys = ("recall@1", "recall@5", "recall@10", "ndcg@5", "ndcg@10", "mrr")
    print(
        f"{counted(result['tools'], 'tool')}, {counted(result['queries'], 'query', 'queries')}, "
        f"indexed in {result['index_seconds']} s, "
        f"latency p50 {result['latency_ms']['p50']} ms p95 {result['latency_ms']['p95']} ms"
    )
    for line in _kept_and_lost(result["repaired_tools"], result["repairs"], result["rejected_tools"],
                               [f"{e['tool']} ({e['pointer']}): {e['reason']}" for e in result["rejections"]]):
        print(printable(line), file=sys.stderr)
    for line in _eval_warnings(result):
        print(printable(line), file=sys.stderr)
    # The categories indented under the overall row (a category may be called "all"), written as printable()
    # does (they come from the dataset), as wide as the longest (cut at 23, two would read alike).
    names = {name: "  " + printable(name) for name in result["by_category"]}
    width = max([24, *(len(shown) + 1 for shown in names.values())])
    print(f"{'category':<{width}}{'n':>7}" + "".join(f"{k:>11}" for k in keys))
    print(f"{'all':<{width}}{result['queries']:>7}" + "".join(f"{result[k]:>11.3f}" for k in keys))
    for name, row in result["by_category"].items():
        print(f"{names[name]:<{width}}{row['queries']:>7}" + "".join(f"{row[k]:>11.3f}" for k in keys))
    if args.json_out:
        try:  # the figures are printed above: a path that cannot be written loses the file only
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(json.dumps(result, indent=2, ensure_ascii=False))
        except OSError as exc:
            return fail(BadRequest(f"{args.json_out}: cannot be written ({exc.strerror or exc})"))
    return 0
