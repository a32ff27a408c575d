"""`toolscout bench tokens`: tools/list tokens of every front-end mode and profile for a catalog."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import anyio

from service.benchmarks import save_text
from service.benchmarks.arguments import json_object, positive_int
from service.errors import ToolscoutError
from service.settings import Settings


def register_bench(bench_subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    tokens = bench_subparsers.add_parser(
        "tokens",
        help="count tokens per turn of each MCP front-end mode and profile (deterministic JSON)",
        description="Counts (cl100k) the tools/list of lazy, grouped, full and dynamic modes, for the whole "
        "catalog and for each profile, plus the tokens of a typical search result and the saving against the "
        "full list. The output is identical on repeated runs; --live-timings adds latencies measured through "
        "the front end against the running API.",
    )
    tokens.add_argument(
        "--catalog",
        type=Path,
        default=None,
        help="an MCP tools/list JSON, a JSONL catalog or a folder of them (default: the demo "
        "catalog of 8 real servers, 85 tools)",
    )
    tokens.add_argument(
        "--profiles", type=Path, default=None, help="profiles file (default: settings frontend.profiles_file)"
    )
    tokens.add_argument(
        "-k", type=positive_int, default=None, help="search result size (default: settings search.default_k)"
    )
    tokens.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    tokens.add_argument("--markdown", action="store_true", help="print the README table instead of JSON")
    tokens.add_argument(
        "--live-timings",
        action="store_true",
        help="add latencies of list, search and call through the front end (needs the API running)",
    )
    tokens.add_argument("--rounds", type=positive_int, default=20, help="repetitions per live timing (default 20)")
    tokens.add_argument(
        "--call-tool",
        default=None,
        help="tool to time calls of (default: a read-only tool without required arguments)",
    )
    tokens.add_argument(
        "--call-arguments", type=json_object, default={}, help="JSON object of arguments for --call-tool (default {})"
    )
    tokens.add_argument(
        "--code-mode",
        action="store_true",
        help="add the code-mode scenario: a five-step task on real git, filesystem and memory servers, lazy mode "
        "(one call per step) against one run_script",
    )
    tokens.set_defaults(func=cmd_tokens)


def cmd_tokens(args: argparse.Namespace) -> int:
    from service.benchmarks.tokens import dumps, live_timings, load_catalog, markdown_table, token_report
    from service.mcp.profiles import load_profiles

    settings = Settings()
    try:
        catalog = load_catalog(args.catalog)
        profiles = load_profiles(args.profiles or settings.frontend.profiles_file)
        label = str(args.catalog) if args.catalog else "service/demo/catalogs"
        report = token_report(catalog, profiles, label, args.k or settings.search.default_k)
        if args.live_timings:
            # The SDK client warns on every call of a tool that full mode does not list (the meta-tools).
            logging.getLogger("client").setLevel(logging.ERROR)
            report["live"] = anyio.run(
                lambda: live_timings(
                    settings,
                    rounds=args.rounds,
                    call_tool=args.call_tool,
                    call_arguments=args.call_arguments,
                )
            )
        if args.code_mode:
            from service.benchmarks.code_mode import code_mode_scenario

            report["code_mode"] = anyio.run(code_mode_scenario)
    except ToolscoutError as exc:
        print(f"error: {exc.detail}", file=sys.stderr)
        return 1
    text = dumps(report)
    if args.json_out:
        save_text(args.json_out, text)
    sys.stdout.write(markdown_table(report) if args.markdown else text)
    return 0
