"""A TCP relay between a service and PostgreSQL that a test can cut: the database host down, or a server that
stops answering."""

from __future__ import annotations

import asyncio
import threading

from sqlalchemy.engine import make_url

from tests.processes import free_port


class DatabaseLink:
    """A TCP relay between the replicas and PostgreSQL, in a thread of its own, that the test can cut: `refuse`
    drops every connection and refuses new ones (the database host down), `hang` keeps them open and forwards
    nothing (a partition: packets lost, no reset), `restore` relays again."""

    def __init__(self, target_port: int = 5432) -> None:
        self.target_port = target_port
        self.port = free_port()
        self.mode = "relay"
        self._loop = asyncio.new_event_loop()
        self._writers: set[asyncio.StreamWriter] = set()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def url(self, database_url: str) -> str:
        return make_url(database_url).set(port=self.port).render_as_string(hide_password=False)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._loop.run_until_complete(asyncio.start_server(self._relay, "127.0.0.1", self.port))
        self._ready.set()
        self._loop.run_forever()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.mode == "refuse":
            writer.close()
            return
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, upstream_writer))
        await asyncio.gather(self._pipe(reader, upstream_writer), self._pipe(upstream_reader, writer))

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                await self._flowing.wait()
                if self.mode == "refuse":
                    break
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            self._writers.discard(writer)
            writer.close()

    def _set(self, mode: str) -> None:
        self.mode = mode
        self._loop.call_soon_threadsafe(self._flowing.clear if mode == "hang" else self._flowing.set)
        if mode == "refuse":
            for writer in list(self._writers):
                self._loop.call_soon_threadsafe(writer.transport.abort)

    def refuse(self) -> None:
        self._set("refuse")

    def hang(self) -> None:
        self._set("hang")

    def restore(self) -> None:
        self._set("relay")
