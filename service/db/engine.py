"""Engines, sessions and the migration runner."""

from __future__ import annotations

import logging
import math
import os
import zlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from service.db.bounded import bounded_connector, ping_on_checkout

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
# pg_advisory_lock key of the migrations: replicas starting together upgrade one after the other.
MIGRATION_LOCK_KEY = 0x746F6F6C73636F75  # "toolscou"
DEMO_SEED_LOCK_KEY = MIGRATION_LOCK_KEY + 1
CATALOG_WRITE_LOCK_KEY = MIGRATION_LOCK_KEY + 2
SERVER_ADD_LOCKS = 0x7473_6164  # "tsad": adding one server id
APPROVAL_REQUEST_LOCKS = 0x7473_6172  # "tsar": one caller's approval requests
LOG_PRUNE_LOCK_KEY = 0x74736C6F6773  # "tslogs": the raw logs' retention (usage/retention.py), one replica at a time


def lock_key(kind: int, name: str) -> int:
    """The advisory lock key of one name of a kind (a CRC-32 collision only makes two names take turns)."""
    return kind << 32 | zlib.crc32(name.encode())


def sync_url(url: str) -> str:
    """The URL for synchronous use (Alembic): plain sqlite, psycopg for PostgreSQL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return parsed.set(drivername="sqlite").render_as_string(hide_password=False)
    if parsed.get_backend_name() == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def async_url(url: str) -> str:
    """The URL for the async engine: aiosqlite for SQLite, psycopg (async) for PostgreSQL."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        return parsed.set(drivername="sqlite+aiosqlite").render_as_string(hide_password=False)
    if parsed.get_backend_name() == "postgresql":
        return parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return url


def _sqlite_pragmas(dbapi_connection, _record) -> None:  # type: ignore[no-untyped-def]
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def postgres_timeouts(url: str, seconds: float) -> dict[str, int]:
    """libpq's connection parameters that bound a connection attempt and a connection whose server stopped
    answering (`tcp_user_timeout`: sent data unacknowledged that long fails the connection; keepalives find an idle
    one dead as fast), unless the URL sets them itself."""
    whole = max(1, math.ceil(seconds))
    wanted = {
        "connect_timeout": whole,
        "tcp_user_timeout": int(seconds * 1000),
        "keepalives": 1,
        "keepalives_idle": whole,
        "keepalives_interval": max(1, whole // 3),
        "keepalives_count": 3,
    }
    given = make_url(url).query
    return {key: value for key, value in wanted.items() if key not in given}


def write_bound(url: str, seconds: float) -> float | None:
    """How long a log's write may wait for the database: `seconds` on PostgreSQL; no bound on SQLite, whose writes
    wait for the file's lock (busy_timeout) and whose cancelled call would go on in its thread."""
    return seconds if make_url(url).get_backend_name() == "postgresql" else None


logger = logging.getLogger(__name__)

# The data folder and the SQLite database hold every caller's queries, call records and stored results (a tool's
# whole answer): a folder and files other users of the machine could read were made with the umask's 0755 and 0644.
PRIVATE_FOLDER_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


def private_folder(path: Path) -> None:
    """Create a folder (its parents as usual) that only this user may enter; one that exists keeps its mode."""
    if not path.is_dir():
        path.mkdir(mode=PRIVATE_FOLDER_MODE, parents=True, exist_ok=True)


def private_file(path: Path) -> None:
    """Create a file only this user may read (an empty file is a new SQLite database, and SQLite gives its -wal and
    -shm files the database's mode), or take group and others' access away from one this user owns."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT, PRIVATE_FILE_MODE))
    for each in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            status = each.stat()
        except FileNotFoundError:
            continue
        if status.st_mode & 0o077 and status.st_uid == os.getuid():
            each.chmod(status.st_mode & PRIVATE_FILE_MODE)  # chmod(2) reads the permission bits only
            logger.warning("%s was readable by other users of this machine; it is now this user's only", each)


def private_sqlite(database: str | None) -> None:
    """The folder and the file of a SQLite database, made private (not an in-memory one)."""
    if database and database != ":memory:" and not database.startswith("file:"):
        private_folder(Path(database).parent)
        private_file(Path(database))


def create_engine_for(url: str, echo: bool = False, timeout_seconds: float = 10.0) -> AsyncEngine:
    """An async engine for the catalog database; SQLite gets WAL and foreign keys, PostgreSQL connections the
    timeouts of `postgres_timeouts` and, where those cannot help, of `bounded`."""
    full = async_url(url)
    if make_url(full).get_backend_name() == "sqlite":
        private_sqlite(make_url(full).database)
        engine = create_async_engine(full, echo=echo)
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        return engine
    engine = create_async_engine(
        full,
        echo=echo,
        pool_size=10,
        max_overflow=20,
        connect_args={
            **postgres_timeouts(full, timeout_seconds),
            "async_creator_fn": bounded_connector(timeout_seconds),
        },
    )
    ping_on_checkout(engine)
    return engine


@asynccontextmanager
async def one_at_a_time(engine: AsyncEngine, key: int) -> AsyncIterator[None]:
    """Run the block while holding a PostgreSQL advisory lock, so processes sharing the database run it in turn.

    A transaction-level lock: it ends with the transaction however the block ends (a session-level lock whose
    unlock failed would stay with the pooled connection). SQLite takes no lock: a file has one service."""
    if engine.dialect.name != "postgresql":
        yield
        return
    async with engine.begin() as connection:
        await connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})
        yield


async def take_turn(session: AsyncSession, key: int) -> None:
    """Make the session's transaction wait for, then hold until it ends, a PostgreSQL advisory lock: writers of one
    concern on other replicas commit before it reads, or after it commits (SQLite: a file has one service).

    Its reads then see every row the earlier writer committed, so two replicas writing the same new rows at once
    count them once (created on one, unchanged on the other) instead of colliding on a UniqueViolation."""
    if session.get_bind().dialect.name == "postgresql":
        await session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": key})


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """Sessions that keep loaded objects usable after commit."""
    return async_sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    """An Alembic configuration for the migrations folder and this database."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sync_url(url).replace("%", "%%"))
    return config


def upgrade_database(url: str, revision: str = "head", timeout_seconds: float = 10.0) -> None:
    """Apply the migrations up to `revision` (creating the SQLite folder if needed).

    On PostgreSQL the upgrade holds an advisory lock, so replicas starting at once migrate one at a time
    (the later ones find the schema current and do nothing); SQLite's own write lock serialises it there. Its
    connection has the timeouts of `postgres_timeouts`: a start against a database that does not answer fails
    instead of waiting (waiting for the lock, or a long migration, sends nothing and is not cut short)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        private_sqlite(parsed.database)
    config = alembic_config(url)
    if parsed.get_backend_name() != "postgresql":
        command.upgrade(config, revision)
        return
    sync = sync_url(url)
    engine = create_engine(sync, poolclass=NullPool, connect_args=postgres_timeouts(sync, timeout_seconds))
    try:
        try:
            opened = engine.connect()
        except OperationalError as exc:  # a wrong host, port, database or password: one line, not a traceback
            reason = " ".join(str(getattr(exc, "orig", None) or exc).split())
            where = parsed.render_as_string(hide_password=True)
            raise DatabaseUnreachable(f"cannot connect to the database {where}: {reason}") from None
        with opened as connection:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            connection.commit()
            try:
                config.attributes["connection"] = connection
                command.upgrade(config, revision)
                connection.commit()
            finally:
                connection.rollback()
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK_KEY})
                connection.commit()
    finally:
        engine.dispose()


class DatabaseUnreachable(RuntimeError):
    """The database of the settings refused or did not answer the migrations' connection."""


def downgrade_database(url: str, revision: str = "base") -> None:
    """Revert the migrations down to `revision`."""
    command.downgrade(alembic_config(url), revision)


__all__ = [
    "Engine",
    "create_engine_for",
    "postgres_timeouts",
    "write_bound",
    "create_sessionmaker",
    "one_at_a_time",
    "lock_key",
    "take_turn",
    "upgrade_database",
    "downgrade_database",
    "DatabaseUnreachable",
]
