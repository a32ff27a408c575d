"""GET /events: catalog events as Server-Sent Events (`tools_changed` with data {"server": id})."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import anyio
from fastapi import APIRouter
from fastapi.responses import StreamingResponse

from service.catalog.events import CatalogEvent, event_hub
from service.deps import CallerDep, ResourcesDep

router = APIRouter(tags=["events"])

HEARTBEAT_SECONDS = 15.0  # a comment line now and then keeps proxies from closing an idle stream
RETRY_MILLISECONDS = 2000


def format_event(event: CatalogEvent) -> str:
    """One SSE frame."""
    return f"event: {event.kind}\ndata: {json.dumps(event.data, separators=(',', ':'))}\n\n"


@router.get("/events", response_class=StreamingResponse)
async def events(resources: ResourcesDep, caller: CallerDep) -> StreamingResponse:
    """Follow catalog changes; the stream stays open until the client leaves."""
    hub = event_hub(resources)

    async def stream() -> AsyncIterator[str]:
        async with hub.subscribe() as received:
            yield f"retry: {RETRY_MILLISECONDS}\n: connected\n\n"
            while True:
                event: CatalogEvent | None = None
                try:
                    with anyio.move_on_after(HEARTBEAT_SECONDS):
                        event = await received.receive()
                except anyio.EndOfStream:
                    return  # dropped for falling behind: the client reconnects and refetches
                yield format_event(event) if event is not None else ": heartbeat\n\n"

    return StreamingResponse(
        stream(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
