"""Each distinct input schema is checked against the metaschema once per process; what that remembers must not grow
with the schemas' size: an upstream server added over the API (not trusted) lists what it likes, again at each
tools/list_changed, and every tool of every listing goes through this check."""

from __future__ import annotations

import gc
import tracemalloc

from indexer.tools import validate_tool


def big_schema(n: int) -> dict[str, object]:
    """A valid schema of ~100 KB, different for each n."""
    return {"type": "object", "description": f"{n} " + "x" * 100_000, "properties": {"a": {"type": "string"}}}


def test_checked_schemas_are_remembered_by_digest_not_by_text() -> None:
    """Measured before: 300 distinct 100 KB schemas left 29 MiB held by the check's cache (65,536 entries of up
    to 128 KB each: 8 GB when full); the verdicts are remembered by a digest of the schema now."""
    tools = [{"server": "up", "name": f"t{n}", "description": "d", "input_schema": big_schema(n)} for n in range(300)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n, raw in enumerate(tools):
            checked = validate_tool(n, raw)
            assert not hasattr(checked, "reason"), checked
        del checked
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 2 * 2**20, f"{held / 2**20:.1f} MiB held after checking 300 schemas of 100 KB"
    # A schema checked before is still answered from memory, and a bad one still refused.
    assert not hasattr(validate_tool(0, tools[0]), "reason")
    bad = {"server": "up", "name": "bad", "description": "d", "input_schema": {"type": "object", "minLength": -1}}
    assert "minLength" in str(validate_tool(0, bad))
