"""Direct database access for CLI commands that work with or without the service running."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from service.cli.terminal import printable
from service.db.engine import create_engine_for, create_sessionmaker, upgrade_database
from service.resources import Resources, build_resources
from service.settings import Settings

T = TypeVar("T")


async def with_database(settings: Settings, fn: Callable[[Resources], Awaitable[T]]) -> T:
    """Run fn(resources) with the migrated database connected (no index, no model loaded)."""
    resources = build_resources(settings)
    await anyio.to_thread.run_sync(upgrade_database, settings.database_url, "head", settings.db.timeout_seconds)
    resources.engine = create_engine_for(settings.database_url, settings.db.echo, settings.db.timeout_seconds)
    resources.sessionmaker = create_sessionmaker(resources.engine)
    try:
        return await fn(resources)
    finally:
        await resources.engine.dispose()


def print_table(rows: list[dict[str, object]], columns: list[str]) -> None:
    """A plain aligned text table."""
    cells = [[("" if row.get(c) is None else printable(row.get(c))) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
