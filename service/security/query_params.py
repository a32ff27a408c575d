"""Query parameters a route does not define, or a one-value parameter given twice, are a 422 naming them.

As with request bodies (`RequestBody`, extra="forbid"): `GET /tools?serverz=x` used to answer with the whole catalog
and `?limit=1&limit=500` with 500 tools, where the client meant something else."""

from __future__ import annotations

from collections import Counter

from fastapi import Request
from fastapi._compat import field_annotation_is_sequence
from fastapi.routing import APIRoute

from service.errors import InvalidRequest


def _declared(route: APIRoute) -> dict[str, bool]:
    """The query parameters of the route and its dependencies, by name, each with whether it takes several values
    (kept on the route: routes are not hashable)."""
    known: dict[str, bool] | None = getattr(route, "_toolscout_query_parameters", None)
    if known is not None:
        return known
    declared: dict[str, bool] = {}
    pending = [route.dependant]
    while pending:
        dependant = pending.pop()
        for field in dependant.query_params:
            declared[field.alias] = field_annotation_is_sequence(field.field_info.annotation)
        pending.extend(dependant.dependencies)
    route._toolscout_query_parameters = declared  # type: ignore[attr-defined]
    return declared


async def known_query_parameters(request: Request) -> None:
    """An app-wide dependency: refuse what the matched route would silently ignore or overwrite."""
    route = request.scope.get("route")
    # The raw query string, not `request.url.query`: building the URL cost more than the rest of this check.
    if not isinstance(route, APIRoute) or not request.scope.get("query_string"):
        return
    declared = _declared(route)
    errors = []
    for name, count in Counter(name for name, _ in request.query_params.multi_items()).items():
        if name not in declared:
            known = ", ".join(sorted(declared)) or "none"
            errors.append({"pointer": f"/query/{name}", "reason": f"not a parameter of this route (it takes: {known})"})
        elif count > 1 and not declared[name]:
            errors.append({"pointer": f"/query/{name}", "reason": f"given {count} times; it takes one value"})
    if errors:
        summary = "; ".join(f"{e['pointer']}: {e['reason']}" for e in errors)
        raise InvalidRequest(f"Invalid request: {summary}", errors=errors)
