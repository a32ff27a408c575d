"""Direct database access for CLI commands that work with or without the service running."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import anyio
from sqlalchemy.engine import make_url

from service.cli.terminal import printable
from service.db.engine import DatabaseUnreachable, create_engine_for, create_sessionmaker, upgrade_database
from service.errors import DatabaseUnavailable, NotFound
from service.resources import Resources, build_resources
from service.settings import Settings

T = TypeVar("T")


def missing_database(settings: Settings) -> Path | None:
    """The SQLite file of the settings when it does not exist yet, which a command would create empty."""
    url = make_url(settings.database_url)
    if not url.drivername.startswith("sqlite") or url.database in (None, "", ":memory:"):
        return None
    path = Path(url.database).resolve()
    return None if path.exists() else path


def elsewhere(path: Path) -> str:
    """Why a database the CLI did not find is most likely another folder's."""
    return (
        f"no database at {path}: the CLI uses the data folder of the folder it runs in (TOOLSCOUT_DATA_DIR, default "
        "`.toolscout`); run it where `toolscout serve` runs, or set TOOLSCOUT_DATA_DIR or TOOLSCOUT_DB__URL"
    )


async def with_database(settings: Settings, fn: Callable[[Resources], Awaitable[T]], *, create: bool = False) -> T:
    """Run fn(resources) with the migrated database connected (no index, no model loaded). A SQLite database that
    does not exist is created only with `create`: `keys list` or `analytics` run in another folder than the
    service's made an empty one there and said "no API keys" or "no data"."""
    missing = None if create else missing_database(settings)
    if missing is not None:
        raise NotFound(elsewhere(missing))
    resources = build_resources(settings)
    try:
        await anyio.to_thread.run_sync(upgrade_database, settings.database_url, "head", settings.db.timeout_seconds)
    except DatabaseUnreachable as exc:
        raise DatabaseUnavailable(f"{exc} (TOOLSCOUT_DB__URL)") from None
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
