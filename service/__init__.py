"""Toolscout runtime: HTTP API, MCP front end, CLI, execution, policy, learning and analytics."""

from __future__ import annotations


def version() -> str:
    """This Toolscout's version: its installed distribution's, else (a checkout on PYTHONPATH) pyproject.toml's."""
    from importlib import metadata

    try:
        return metadata.version("toolscout")
    except metadata.PackageNotFoundError:
        import tomllib
        from pathlib import Path

        try:
            with (Path(__file__).resolve().parents[1] / "pyproject.toml").open("rb") as pyproject:
                return str(tomllib.load(pyproject)["project"]["version"])
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return "unknown"
