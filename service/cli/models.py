"""`toolscout models export`: export the embedding model to ONNX into the data folder (install and first start)."""

from __future__ import annotations

import argparse

from indexer.onnx_export import VARIANTS, ensure_exported
from service.settings import Settings


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    models = subparsers.add_parser("models", help="export the embedding model to ONNX ahead of the first start")
    commands = models.add_subparsers(dest="models_command", required=True)
    export = commands.add_parser("export", help="export the model to ONNX (skipped when the cached file exists)")
    export.add_argument(
        "--variant", choices=[*VARIANTS, "all"], default=None, help="default: the configured embedding.onnx_variant"
    )
    export.set_defaults(func=run_export)


def run_export(args: argparse.Namespace) -> int:
    settings = Settings()
    variants = VARIANTS if args.variant == "all" else [args.variant or settings.embedding.onnx_variant]
    for variant in variants:
        print(ensure_exported(settings.models_dir, settings.embedding.model, variant))
    return 0
