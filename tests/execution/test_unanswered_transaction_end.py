"""A PostgreSQL server that acknowledges packets but answers nothing, met where no caller's deadline can reach:
a session's close (the pool's ROLLBACK on return) and a `begin()` block's COMMIT, which SQLAlchemy runs in a task
shielded from cancellation, and the ping before a pooled connection is handed out. Each gives up after
db.timeout_seconds (service/db/bounded.py); before, each waited for ever and held a SIGTERM'd replica up (the
cluster test `test_a_sigterm_while_the_database_stalls_...`).

Each case runs on its own event loop in a thread: a wait that nothing can cancel would otherwise hang the suite."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable, Iterator

import anyio
import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker

from service.db.engine import create_engine_for
from tests.conftest import fresh_database
from tests.database_link import DatabaseLink

pytestmark = pytest.mark.postgres

ANSWER_SECONDS = 1.0


@pytest.fixture
def link_and_engine() -> Iterator[tuple[DatabaseLink, Callable[[], AsyncEngine]]]:
    link = DatabaseLink()
    with fresh_database() as url:
        try:
            yield link, lambda: create_engine_for(link.url(url), timeout_seconds=ANSWER_SECONDS)
        finally:
            link.restore()


def outcome_within(seconds: float, work: Callable[[], Awaitable[None]]) -> tuple[float, BaseException | None]:
    """Run `work` on a loop of its own; (how long it took, what it raised). Fails if it is still waiting."""
    result: dict[str, object] = {}

    def run() -> None:
        started = time.monotonic()
        try:
            asyncio.run(work())  # type: ignore[arg-type]
        except BaseException as exc:  # noqa: BLE001 - reported to the test
            result["error"] = exc
        result["took"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still waiting on the silent database after {seconds} s"
    return result["took"], result.get("error")  # type: ignore[return-value]


def on_an_engine(
    link: DatabaseLink, engine_for: Callable[[], AsyncEngine], body: Callable[[AsyncEngine], Awaitable[None]]
) -> tuple[float, BaseException | None]:
    """`body` on a new engine through the link, then the link restored and the engine disposed, within 30 s."""

    async def work() -> None:
        engine = engine_for()
        try:
            await body(engine)
        finally:
            link.restore()
            await engine.dispose()

    return outcome_within(30, work)


def test_a_session_closed_as_the_server_falls_silent_gives_up_on_its_rollback(link_and_engine) -> None:
    link, engine_for = link_and_engine

    async def read_then_close(engine: AsyncEngine) -> None:
        with anyio.move_on_after(3 * ANSWER_SECONDS):  # a caller's deadline: it cannot reach the close
            async with async_sessionmaker(engine)() as session:
                await session.execute(text("SELECT 1"))
                link.hang()

    took, error = on_an_engine(link, engine_for, read_then_close)
    # The rollback gave up as a lost connection: the pool dropped it and the close ended, with the error.
    assert isinstance(error, OperationalError) and "did not answer ROLLBACK in 1 s" in str(error), error
    assert took < ANSWER_SECONDS + 2


def test_a_commit_the_server_never_answers_fails_naming_it(link_and_engine) -> None:
    link, engine_for = link_and_engine

    async def write_then_commit(engine: AsyncEngine) -> None:
        async with async_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("SELECT 1"))
            link.hang()

    took, error = on_an_engine(link, engine_for, write_then_commit)
    assert isinstance(error, OperationalError) and "did not answer COMMIT in 1 s" in str(error), error
    assert took < ANSWER_SECONDS + 2


def test_a_pooled_connection_whose_server_fell_silent_is_not_handed_out(link_and_engine) -> None:
    link, engine_for = link_and_engine

    async def use_the_pool_twice(engine: AsyncEngine) -> None:
        async with engine.connect() as connection:  # leaves one connection in the pool
            await connection.execute(text("SELECT 1"))
        link.hang()
        async with engine.connect() as connection:  # no deadline of its own, as a request
            await connection.execute(text("SELECT 1"))

    took, error = on_an_engine(link, engine_for, use_the_pool_twice)
    # The ping gave up, the new connection's connect_timeout did too: an error, not a request held for ever.
    assert isinstance(error, OperationalError), error
    assert took < 4 * ANSWER_SECONDS + 2


def test_the_ping_leaves_a_pooled_connection_outside_any_transaction(link_and_engine) -> None:
    """The writers' turns (service/cluster/writers.py) switch a pooled connection to AUTOCOMMIT: psycopg refuses
    that inside a transaction, which a ping sent as a plain statement would have opened."""
    link, engine_for = link_and_engine

    async def twice(engine: AsyncEngine) -> None:
        for _ in range(2):
            async with engine.connect() as connection:
                autocommit = await connection.execution_options(isolation_level="AUTOCOMMIT")
                assert (await autocommit.execute(text("SELECT 1"))).scalar() == 1

    _, error = on_an_engine(link, engine_for, twice)
    assert error is None, error


def test_a_commit_that_fails_before_the_bound_keeps_its_own_error(link_and_engine) -> None:
    """Only a wait the bound ended says the database did not answer: a connection lost at once says what it was."""
    link, engine_for = link_and_engine

    async def write_then_lose(engine: AsyncEngine) -> None:
        async with async_sessionmaker(engine)() as session, session.begin():
            await session.execute(text("SELECT 1"))
            link.refuse()  # the connection reset, not silent

    took, error = on_an_engine(link, engine_for, write_then_lose)
    assert isinstance(error, OperationalError) and "did not answer" not in str(error), error
    assert took < ANSWER_SECONDS
