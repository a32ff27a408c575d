"""POST /search."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, BackgroundTasks
from pydantic import BaseModel, Field

from service.deps import CallerDep, ResourcesDep
from service.search.service import log_search, result_view, search_tools

router = APIRouter(tags=["search"])


class SearchRequest(BaseModel):
    """A request for the tools that fit a task."""

    query: str = Field(min_length=1, description="What the agent wants to do, in natural language")
    k: int | None = Field(default=None, ge=1, le=50, description="How many tools (default 5)")
    servers: list[str] | None = Field(default=None, description="Only tools of these servers")
    tags: list[str] | None = Field(default=None, description="Only tools with one of these tags")
    explain: bool = Field(default=False, description="Include each signal's contribution")


class SearchResult(BaseModel):
    name: str
    server: str | None
    tool: str | None
    description: str
    input_schema: dict[str, Any]
    annotations: dict[str, Any]
    tags: list[str]
    score: float
    explain: dict[str, Any] | None = None


class SearchResponse(BaseModel):
    search_id: str
    query: str
    k: int
    results: list[SearchResult]
    latency_ms: float
    parts: list[str] | None = Field(default=None, description="With explain: the parts of a multi-intent request")


@router.post("/search", response_model=SearchResponse, response_model_exclude_none=True)
async def search(
    request: SearchRequest, resources: ResourcesDep, caller: CallerDep, background: BackgroundTasks
) -> dict[str, Any]:
    """The top k tools for a task, best first."""
    k = request.k or resources.settings.search.default_k
    search_id, outcome = await search_tools(
        resources, caller, request.query, k=k, servers=request.servers, tags=request.tags, explain=request.explain
    )
    background.add_task(log_search, resources, search_id, caller, request.query, k, outcome)
    return {
        "search_id": search_id,
        "query": request.query,
        "k": k,
        "results": [result_view(r) for r in outcome.results],
        "latency_ms": round(outcome.latency_ms, 3),
        "parts": outcome.parts if request.explain else None,
    }
