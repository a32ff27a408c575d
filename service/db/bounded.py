"""PostgreSQL connections that give up on a server that stopped answering, where no cancellation can reach.

libpq's timeouts (`postgres_timeouts`) end a connection whose packets go unacknowledged; a server that acknowledges
them and answers nothing (a frozen host, a proxy or partition that keeps the TCP connection open) never trips them.
A statement then waits until its caller gives up and cancels it, which psycopg turns into a bounded cancellation.
Two waits have no such caller:
- a transaction's end (COMMIT, ROLLBACK): SQLAlchemy runs a session's close, and with it the pool's
  rollback-on-return, and a `begin()` block's commit, in a task of its own that it shields from cancellation
  (`_run_to_completion`), so a request or a shutdown step past its bound waited there for ever;
- the ping before a pooled connection is handed out, in a request that has no deadline of its own.
Each of them here has `seconds`: past them the connection's socket is shut, the wait fails as a lost connection
(`psycopg.OperationalError`) and the pool drops the connection."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import psycopg
from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.util import await_only

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BoundedConnection(psycopg.AsyncConnection):  # type: ignore[type-arg]
    """A psycopg connection whose COMMIT, ROLLBACK and ping give up after `answer_seconds` without an answer."""

    answer_seconds: float = 10.0

    async def commit(self) -> None:
        await self.within(super().commit(), "COMMIT")

    async def rollback(self) -> None:
        await self.within(super().rollback(), "ROLLBACK")

    async def ping(self) -> None:
        """An empty statement outside any transaction (in one, it would leave the connection in a transaction).
        A connection already in a transaction at checkout is one the dialect has just set up: not pinged."""
        if self.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            return
        autocommit = self.autocommit
        await self.set_autocommit(True)
        try:
            await self.within(self.execute(";"), "a ping")
        finally:
            if not self.closed:
                await self.set_autocommit(autocommit)

    async def within(self, work: Awaitable[T], what: str) -> T:
        fired: list[bool] = []
        cut = asyncio.get_running_loop().call_later(self.answer_seconds, lambda: fired.append(self._shut_socket()))
        try:
            return await work
        except psycopg.OperationalError as exc:
            if not fired:  # a failure of its own, before the bound
                raise
            raise psycopg.OperationalError(
                f"the database did not answer {what} in {self.answer_seconds:g} s (db.timeout_seconds): "
                f"connection dropped ({exc})"
            ) from exc
        finally:
            cut.cancel()

    def _shut_socket(self) -> None:
        """End the TCP connection under libpq: a wait on it sees the end of the stream at once. (Closing the file
        descriptor would not wake it; shutting a duplicate down ends the one socket both name.)"""
        with contextlib.suppress(OSError):
            with socket.socket(fileno=os.dup(self.pgconn.socket)) as duplicate:
                duplicate.shutdown(socket.SHUT_RDWR)
            logger.warning("database: no answer in %g s, connection dropped", self.answer_seconds)


def bounded_connector(seconds: float) -> Callable[..., Awaitable[BoundedConnection]]:
    """The `async_creator_fn` of SQLAlchemy's psycopg dialect: connections of `BoundedConnection`."""

    async def connect(*args: Any, **kwargs: Any) -> BoundedConnection:
        connection = await BoundedConnection.connect(*args, **kwargs)
        connection.answer_seconds = seconds
        return connection

    return connect


def ping_on_checkout(engine: AsyncEngine) -> None:
    """SQLAlchemy's `pool_pre_ping`, with the ping bounded: a pooled connection whose server stopped answering is
    dropped (the pool then opens a new one, whose connect_timeout bounds it) instead of holding the request."""

    @event.listens_for(engine.sync_engine, "checkout")
    def ping(_dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        try:
            await_only(record.driver_connection.ping())
        except psycopg.Error as exc:
            logger.warning("database: a pooled connection failed its ping, dropped (%s)", exc)
            raise DisconnectionError(str(exc)) from exc
