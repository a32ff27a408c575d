"""The REST client of the MCP front end: every front-end action is one call to the Toolscout API.

Errors of the API arrive as problem+json and become `ApiError` (status, title and detail kept), and transport
failures become `ApiUnavailable`, so the front end can turn any of them into an `isError` tool result.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx

from service.errors import InvalidArguments, ToolscoutError
from service.http_transport import async_nodelay_transport

logger = logging.getLogger(__name__)

PAGE_SIZE = 1000  # the largest page GET /tools serves


class ApiError(ToolscoutError):
    """A problem+json answer of the Toolscout API, carried over to the front end."""

    def __init__(self, problem: dict[str, Any]) -> None:
        known = {"type", "title", "status", "detail", "instance"}
        detail = str(problem.get("detail") or problem.get("title") or "The Toolscout API refused the request")
        if problem.get("status") == 401:  # the key is the front end's own, not the chat client's
            detail += " (the front end sends the key in TOOLSCOUT_FRONTEND__API_KEY)"
        super().__init__(detail, **{k: v for k, v in problem.items() if k not in known})
        self.status = int(problem.get("status") or 500)
        self.title = str(problem.get("title") or "Toolscout API error")
        self.slug = str(problem.get("type") or "").rsplit("/", 1)[-1] or "api-error"


class ApiUnavailable(ApiError):
    """The Toolscout API could not be reached or answered with something that is not JSON."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            {"type": "api-unavailable", "title": "Toolscout API unavailable", "status": 503, "detail": detail}
        )


def path_segment(value: str, what: str) -> str:
    """One client-given value as a single, quoted path segment: `../keys` must never reach GET /keys."""
    if value in ("", ".", "..") or len(value) > 512:
        raise InvalidArguments(
            f"`{what}` is not a valid {what}", errors=[{"pointer": f"/{what}", "reason": "not a valid id"}]
        )
    return quote(value, safe="")


def _problem_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict) and ("detail" in body or "title" in body):
        return body
    reason = response.text[:300].strip() or response.reason_phrase
    return {
        "type": "http-error",
        "title": "HTTP error",
        "status": response.status_code,
        "detail": f"{response.request.method} {response.request.url.path} answered "
        f"{response.status_code}: {reason}",
    }


class ToolscoutApi:
    """Async client of the Toolscout REST API (one connection pool per front end process)."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        timeout: float = 120.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        headers = {"Accept": "application/json"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self.base_url = base_url
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport or async_nodelay_transport(),
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            response = await self._client.request(method, path, **kwargs)
        except httpx.TimeoutException as exc:
            raise ApiUnavailable(
                f"The Toolscout API at {self.base_url} did not answer {method} {path} in time"
            ) from exc
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"The Toolscout API at {self.base_url} is unreachable: {exc}") from exc
        if response.status_code >= 400:
            raise ApiError(_problem_of(response))
        try:
            return response.json()
        except ValueError as exc:
            raise ApiUnavailable(f"{method} {path} answered a body that is not JSON") from exc

    async def ready(self) -> dict[str, Any]:
        """The API's readiness (`GET /readyz`): ApiError when it says it is not ready, ApiUnavailable when it does
        not answer within 5 s."""
        return await self._request("GET", "/readyz", timeout=5.0)  # type: ignore[no-any-return]

    async def search(
        self,
        query: str,
        *,
        k: int | None = None,
        servers: list[str] | None = None,
        tags: list[str] | None = None,
    ) -> dict[str, Any]:
        """POST /search: the best tools for a task."""
        body: dict[str, Any] = {"query": query}
        if k is not None:
            body["k"] = k
        if servers:
            body["servers"] = servers
        if tags:
            body["tags"] = tags
        return dict(await self._request("POST", "/search", json=body))

    async def list_tools(self, *, server: str | None = None, tag: str | None = None) -> list[dict[str, Any]]:
        """GET /tools, every page: the whole catalog (or one server's, or one tag's)."""
        tools: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": PAGE_SIZE}
        if server:
            params["server"] = server
        if tag:
            params["tag"] = tag
        while True:
            page = await self._request("GET", "/tools", params={**params, "offset": len(tools)})
            batch = page.get("tools") or []
            tools.extend(batch)
            if not batch or len(tools) >= int(page.get("total", len(tools))):
                return tools

    async def get_tool(self, name: str) -> dict[str, Any]:
        """GET /tools/{name}."""
        return dict(await self._request("GET", f"/tools/{path_segment(name, 'name')}"))

    async def execute(
        self,
        name: str,
        arguments: dict[str, Any],
        search_id: str | None = None,
        approval_id: str | None = None,
    ) -> dict[str, Any]:
        """POST /execute: run a tool on the server that owns it."""
        body: dict[str, Any] = {"name": name, "arguments": arguments}
        if search_id:
            body["search_id"] = search_id
        if approval_id:
            body["approval_id"] = approval_id
        return dict(await self._request("POST", "/execute", json=body))

    async def run(
        self, script: str, approval_ids: list[str] | None = None, timeout_seconds: float | None = None
    ) -> dict[str, Any]:
        """POST /run: a code-mode script."""
        body: dict[str, Any] = {"script": script}
        if approval_ids:
            body["approval_ids"] = approval_ids
        if timeout_seconds is not None:
            body["timeout_seconds"] = timeout_seconds
        return dict(await self._request("POST", "/run", json=body))

    async def fetch_result(self, result_id: str, offset: int | None = None) -> dict[str, Any]:
        """GET /results/{id}: the next part of a result that was cut to the token budget."""
        params = {"offset": offset} if offset is not None else None
        path = f"/results/{path_segment(result_id, 'result_id')}"
        return dict(await self._request("GET", path, params=params))

    async def servers(self) -> list[dict[str, Any]]:
        """GET /servers: upstream servers with state and tool counts."""
        body = await self._request("GET", "/servers")
        return list(body.get("servers") or [])

    async def events(self) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """GET /events (Server-Sent Events): yields ("open", {}) once connected, then (event, data) until the
        stream ends.

        Raises ApiUnavailable (or ApiError for a refusal) when the stream cannot be opened or breaks."""
        try:
            async with self._client.stream(
                "GET",
                "/events",
                headers={"Accept": "text/event-stream"},
                timeout=httpx.Timeout(None, connect=10.0),
            ) as response:
                if response.status_code >= 400:
                    await response.aread()
                    raise ApiError(_problem_of(response))
                yield "open", {}
                event, data = "message", []
                async for line in response.aiter_lines():
                    if not line:
                        if data:
                            yield event, _event_data("\n".join(data))
                        event, data = "message", []
                    elif line.startswith(":"):
                        continue
                    else:
                        field, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        if field == "event":
                            event = value
                        elif field == "data":
                            data.append(value)
        except httpx.HTTPError as exc:
            raise ApiUnavailable(f"The event stream of {self.base_url} broke: {exc}") from exc


def _event_data(raw: str) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        return {"raw": raw}
    return data if isinstance(data, dict) else {"value": data}
