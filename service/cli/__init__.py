"""The `toolscout` command. Each command group lives in its own module and registers its subparsers."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# Modules providing `register(subparsers)`; each adds its commands with `set_defaults(func=...)`.
COMMAND_MODULES = [
    "service.cli.core", "service.cli.bench", "service.cli.keys", "service.cli.analytics", "service.cli.mcp",
    "service.cli.servers", "service.cli.models",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="toolscout", description="Semantic tool retrieval for LLM agents.")
    parser.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
