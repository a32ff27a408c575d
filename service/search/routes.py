"""POST /search."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import APIRouter
from fastapi.responses import Response
from pydantic import BaseModel, Field, field_validator
from pydantic_core import to_jsonable_python

from service.deps import CallerDep, ResourcesDep
from service.search.retrieval import SearchOutcome
from service.search.service import filter_warnings, log_search, result_view, search_tools
from service.security.json_body import StrictJsonBodyRoute
from service.security.request_body import RequestBody, Text

router = APIRouter(tags=["search"], route_class=StrictJsonBodyRoute)


class SearchRequest(RequestBody):
    """A request for the tools that fit a task."""

    query: Text = Field(min_length=1, description="What the agent wants to do, in natural language")
    # At most search.max_k, checked by search_tools (a bound written here refused k past 50 when max_k was raised).
    k: int | None = Field(
        default=None,
        ge=1,
        strict=True,
        description="How many tools (default: the setting search.default_k, 5; at most search.max_k, 50)",
    )
    servers: list[Text] | None = Field(default=None, description="Only tools of these servers")
    tags: list[Text] | None = Field(default=None, description="Only tools with one of these tags")
    explain: bool = Field(default=False, strict=True, description="Include each signal's contribution")

    @field_validator("query")
    @classmethod
    def _not_blank(cls, query: str) -> str:
        if not query.strip():
            raise ValueError("must not be blank (only whitespace)")
        return query


class SearchResult(BaseModel):
    name: str
    server: str | None
    tool: str | None
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    tags: list[str]
    score: float
    available: bool | None = Field(
        default=None,
        description="Whether the tool can be called now: its server's connection is ready, or on its first start, "
        "and the tool does not run only as a task (false: see unavailable_reason). Left out when unknown (the CLI "
        "searching the data folder itself, no gateway running)",
    )
    unavailable_reason: str | None = Field(
        default=None,
        description="Why an unavailable tool cannot be called now: its server's state as GET /servers shows it "
        "(catalog: no connection; backoff; connecting, installing or starting again after a failure; stopped), or "
        "task_required (its server runs it only as a task, which the gateway does not ask for)",
    )
    explain: dict[str, Any] | None = None


class SearchResponse(BaseModel):
    search_id: str
    query: str
    k: int
    results: list[SearchResult]
    latency_ms: float
    parts: list[str] | None = Field(default=None, description="With explain: the parts of a multi-intent request")
    warnings: list[dict[str, str]] | None = Field(
        default=None,
        description="A server or tag of the request that no tool the caller may use has ({pointer, reason}, with "
        "the nearest the caller has): the search found nothing there",
    )


def search_json(
    search_id: str, query: str, k: int, outcome: SearchOutcome, explain: bool, warnings: list[dict[str, str]]
) -> bytes:
    """The SearchResponse of a search as JSON, written by orjson without validating it again: the shape
    `response_model_exclude_none` gave (no null field of the models; nulls inside schemas and explain stay)."""
    body: dict[str, Any] = {
        "search_id": search_id,
        "query": query,
        "k": k,
        "results": [
            {key: value for key, value in result_view(r).items() if value is not None} for r in outcome.results
        ],
        "latency_ms": round(outcome.latency_ms, 3),
    }
    if explain and outcome.parts is not None:
        body["parts"] = outcome.parts
    if warnings:
        body["warnings"] = warnings
    return orjson.dumps(body, default=to_jsonable_python, option=orjson.OPT_SERIALIZE_NUMPY)


# `response_model` documents the answer; the route returns its JSON itself, so FastAPI neither validates nor
# serialises it a second time (0.1 ms of a search's event-loop time).
@router.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
async def search(request: SearchRequest, resources: ResourcesDep, caller: CallerDep) -> Response:
    """The top k tools for a task, best first."""
    k = request.k or resources.settings.search.default_k
    search_id, outcome = await search_tools(
        resources, caller, request.query, k=k, servers=request.servers, tags=request.tags, explain=request.explain
    )
    # Queued for the batched writer before the answer leaves (it never blocks): no background task to schedule.
    await log_search(resources, search_id, caller, request.query, k, outcome)
    warnings = filter_warnings(resources, caller, request.servers, request.tags)
    body = search_json(search_id, request.query, k, outcome, request.explain, warnings)
    return Response(body, media_type="application/json")
