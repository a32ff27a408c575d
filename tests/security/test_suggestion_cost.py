"""The closest names of an unknown tool cost up to 500 comparisons in Python (55 ms a name at 50k tools): a batch or
a script computes them for its first SUGGESTED_NAMES_PER_REQUEST unknown names only. Measured on 50k tools, an
admin's batch of 100 misspelt names held the event loop 6.0 s and a script of 50 such calls 3.1 s; now 0.44 and
0.47 s. A hidden name and a missing one spend the budget alike."""

from __future__ import annotations

from typing import Any

from indexer.closest import close_names
from service.catalog.lookup import SUGGESTED_NAMES_PER_REQUEST
from service.search.retrieval import NameDirectory
from tests.security.conftest import bearer

TOOLS = [{"server": "util", "name": f"format_date_{i}", "description": f"Format a date, style {i}"} for i in range(40)]


def counted_closest(world: dict[str, Any]) -> list[str]:
    """The names the name directory is asked the closest tools of, from now on."""
    directory = world["app"].state.resources.retriever.directory
    asked: list[str] = []
    closest = directory.closest

    def counting(name: str, *args: Any, **kwargs: Any) -> list[str]:
        asked.append(name)
        return list(closest(name, *args, **kwargs))

    directory.closest = counting
    return asked


async def test_a_batch_of_misspelt_names_gets_a_few_suggestions(world: dict[str, Any]) -> None:
    http, admin, dev = world["http"], world["admin"], world["dev"]
    assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
    asked = counted_closest(world)
    names = [f"util__format_dat_{i}" for i in range(30)] + ["vault__get_secret", "vault__get_secreq"]
    batch = {"calls": [{"name": n} for n in names]}
    items = (await http.post("/execute/batch", json=batch, headers=bearer(dev))).json()["results"]
    assert [i["status"] for i in items] == [404] * len(names)
    suggested = [i["error"]["closest"] for i in items if i["error"]["closest"]]
    assert len(asked) == len(suggested) == SUGGESTED_NAMES_PER_REQUEST, (asked, suggested)
    assert all(closest[0].startswith("util__format_date_") for closest in suggested)
    # Each request has its own budget: a single call is still helped.
    single = await http.post("/execute", json={"name": "util__format_dat_7"}, headers=bearer(dev))
    assert single.status_code == 404 and single.json()["closest"][0] == "util__format_date_7"


async def test_a_script_of_misspelt_calls_gets_a_few_suggestions(world: dict[str, Any]) -> None:
    http, admin, dev = world["http"], world["admin"], world["dev"]
    assert (await http.post("/tools", json={"tools": TOOLS}, headers=bearer(admin))).status_code == 200
    asked = counted_closest(world)
    script = """
const found = [];
for (let i = 0; i < 20; i++) {
  try { await tools['util__format_dat_' + i]({}); } catch (e) { found.push(e.problem.closest.length); }
}
return found;
"""
    ran = (await http.post("/run", json={"script": script}, headers=bearer(dev))).json()
    assert len(ran["result"]) == 20 and sum(1 for n in ran["result"] if n) == SUGGESTED_NAMES_PER_REQUEST, ran
    assert len(asked) == SUGGESTED_NAMES_PER_REQUEST


class _Unwalkable(dict[str, Any]):
    def __iter__(self) -> Any:
        raise AssertionError("walked every name of the catalog")


def test_a_small_scope_finds_its_closest_names_without_walking_the_catalog() -> None:
    """A dev's 404 walked every name of the catalog to find the few it may use: 0.08 ms without hidden tools, 2.9 ms
    among 100k of them (a count of what it may not see, told by timing); its own names are the pool now."""
    directory = NameDirectory()
    for server, name in [("public", "get_weather"), ("util", "purge_cache"), ("util", "format_date")]:
        directory.add(f"{server}__{name}", name, server, [])
    for i in range(2_000):
        directory.add(f"vault__get_weather_{i}", f"get_weather_{i}", "vault", [])
    allowed = frozenset({"public__get_weather", "util__purge_cache", "util__format_date", "util__gone"})
    own = {q: str(directory.listed_name(q)) for q in sorted(allowed) if directory.listed_name(q) is not None}
    directory._entries = _Unwalkable(directory._entries)
    found = {name: directory.closest(name, allowed=allowed) for name in ("public__get_weathr", "get_weather_1", "x")}
    assert found == {name: close_names(name, own) for name in found}
    assert found["public__get_weathr"] == found["get_weather_1"] == ["public__get_weather"] and found["x"] == []
