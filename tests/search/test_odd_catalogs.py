"""Catalogs nobody tried: names and descriptions in other scripts, compatibility forms and decomposed accents,
found by the request that writes them plainly (its text is read in NFKC: indexer/query_text.py)."""

from __future__ import annotations

import unicodedata

import httpx


async def test_a_name_in_compatibility_forms_or_decomposed_is_first_for_its_spelling(
    client: httpx.AsyncClient,
) -> None:
    """The request is read in NFKC without pictographs, and so is each name's exact-match key now: `ＡＢＣ`, a
    decomposed `café` and `🔥 fire` were not first for a request that spelled them."""
    names = ["ＡＢＣ", "cafe\u0301_menu", "🔥_fire_alarm", "ﾃｽﾄ", "Ⅻ_roman"]
    tools = [{"server": "odd", "name": name, "description": "Does one thing"} for name in names]
    tools += [{"server": "odd", "name": f"other_{i}", "description": "Does one thing"} for i in range(20)]
    assert (await client.post("/tools", json={"tools": tools})).json()["errors"] == []
    for name in names:
        for query in {name, unicodedata.normalize("NFKC", name), unicodedata.normalize("NFC", name)}:
            body = (await client.post("/search", json={"query": query, "k": 2, "explain": True})).json()
            first = body["results"][0]
            assert (first["tool"], first["explain"]["exact_name"]) == (name, True), query
