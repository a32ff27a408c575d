"""The families a scrape exposes: the README's table names each of them, they follow Prometheus's naming
(`_total` counters, `_seconds` durations, no `_created` twins), and made-up paths add no series."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.observability.test_observability import running, scrape, value

pytestmark = pytest.mark.upstream

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_metrics() -> set[str]:
    """The metric names of the README's table under `GET /metrics`."""
    text = README.read_text(encoding="utf-8")
    table = text[text.index("**`GET /metrics`**") : text.index("Label sets are bounded")]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `toolscout_")]
    return {name for row in rows for name in re.findall(r"`(toolscout_\w+)`", row)}


async def test_the_readme_lists_every_family_and_the_names_follow_prometheus(tmp_path: Path) -> None:
    async with running(tmp_path) as (_, client):
        assert (await client.post("/execute", json={"name": "t__echo", "arguments": {"text": "hi"}})).status_code == 200
        assert (await client.post("/search", json={"query": "echo some text", "k": 3})).status_code == 200
        text = (await client.get("/metrics")).text
    families = {f.name: f.type for f in text_string_to_metric_families(text)}  # a counter's without `_total`
    exposed = {name + "_total" if kind == "counter" else name for name, kind in families.items()}
    assert exposed == readme_metrics()
    assert not [name for name in exposed if name.endswith("_created")], exposed  # there were 8 such gauges
    declared = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    assert all(name.endswith("_total") for name, kind in declared.items() if kind == "counter"), declared
    assert all(name.endswith("_seconds") for name, kind in declared.items() if kind == "histogram"), declared


async def test_a_thousand_made_up_paths_add_no_series(tmp_path: Path) -> None:
    async with running(tmp_path) as (_, client):
        for path in ("/nothing/0", "/tools/x0/approve", "/console/static/d0.js", "/analytics/x0"):
            await client.get(path)
        before = scrape((await client.get("/metrics")).text)
        for i in range(1, 251):
            for path in (f"/nothing/{i}?q={i}", f"/tools/x{i}/approve", f"/console/static/d{i}.js", f"/analytics/x{i}"):
                assert (await client.get(path)).status_code in (404, 405)
        after = scrape((await client.get("/metrics")).text)
    # Only the scrape's own route is new: every made-up path counts under a template or `unmatched`.
    new = {key for key in after if key not in before}
    assert new and all(dict(labels)["route"] == "/metrics" for _, labels in new), new
    routes = {dict(labels).get("route") for name, labels in after if name == "toolscout_http_requests_total"}
    assert routes == {"unmatched", "/tools/{name}/approve", "/console/static/{path}", "/metrics"}
    assert value(after, "toolscout_http_requests_total", method="GET", route="unmatched", status="404") == 502
