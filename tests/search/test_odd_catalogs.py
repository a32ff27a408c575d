"""Catalogs nobody tried: names and descriptions in other scripts, compatibility forms and decomposed accents,
found by the request that writes them plainly (its text is read in NFKC: indexer/query_text.py)."""

from __future__ import annotations

import unicodedata

import httpx

NFD = unicodedata.normalize
# Each tool's own language; the request shares words with its description only, never its name.
FOREIGN = [
    ("hi_weather", "किसी शहर का मौसम पूर्वानुमान दिखाएं", "मौसम पूर्वानुमान"),
    ("hi_email", "प्राप्तकर्ता को ईमेल भेजें", "ईमेल भेजें"),
    ("th_weather", "แสดงพยากรณ์อากาศของเมือง", "พยากรณ์อากาศ"),
    ("th_email", "ส่งอีเมลถึงผู้รับ", "ส่งอีเมล"),
    ("ja_calendar", "ｶﾚﾝﾀﾞｰに予定を追加", "カレンダー"),
    ("vi_event", NFD("NFD", "Tạo sự kiện trong lịch"), "tạo sự kiện"),
    ("fr_event", NFD("NFD", "Créer un événement récurrent"), "événement récurrent"),
    ("fw_checksum", "Ｃｏｍｐｕｔｅ ｔｈｅ ｃｈｅｃｋｓｕｍ of a blob", "checksum"),
    ("ru_weather", "Показать прогноз погоды для города", "прогноз погоды"),
    ("zh_email", "向收件人发送电子邮件", "发送电子邮件"),
]


async def test_a_catalog_in_other_scripts_is_found_in_its_language_by_the_lexical_signal(
    client: httpx.AsyncClient,
) -> None:
    """The deterministic test embedder gives these requests nothing (no word of theirs is a word of a description):
    BM25 alone must find each tool. Most of these requests' words are in one tool's text only, and a signal whose
    hits all score alike gave each 0, as if it had found nothing (ranking.fuse): th_weather and zh_email were
    not first. (Before document format 4, hi_email, ja_calendar, vi_event, fr_event and fw_checksum had no
    lexical score either.)"""
    tools = [{"server": "intl", "name": name, "description": text} for name, text, _ in FOREIGN]
    assert (await client.post("/tools", json={"tools": tools})).json()["created"] == len(FOREIGN)
    for name, _, query in FOREIGN:
        body = (await client.post("/search", json={"query": query, "k": 3, "explain": True})).json()
        first = body["results"][0]
        assert first["tool"] == name, (query, [r["tool"] for r in body["results"]])
        assert first["explain"]["similarity"]["lexical"] > 0, query


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


async def test_a_name_with_nothing_to_spell_is_no_exact_match_for_a_query_of_separators(
    client: httpx.AsyncClient,
) -> None:
    """A name of separators only (`___`) or of emoji (read as nothing, as a request's are) has an empty exact-match
    key: a query `_` or `-` put both first as exact names. Each is still found by its qualified name."""
    tools = [
        {"server": "e", "name": "___", "description": "Underscores"},
        {"server": "e", "name": "🔥🔥", "description": "Fire"},
        {"server": "e", "name": "real_tool", "description": "Real"},
    ]
    created = (await client.post("/tools", json={"tools": tools})).json()["tools"]
    for query in ("_", "-", ". _"):
        body = (await client.post("/search", json={"query": query, "k": 3, "explain": True})).json()
        assert [r["explain"]["exact_name"] for r in body["results"]] == [False] * 3, query
    for qualified in created:
        first = (await client.post("/search", json={"query": qualified, "k": 1})).json()["results"][0]
        assert first["name"] == qualified


async def test_of_two_names_the_search_reads_alike_the_one_spelled_as_the_request_is_first(
    client: httpx.AsyncClient,
) -> None:
    """`ABC` and `ＡＢＣ`, `café` composed and decomposed: two tools each (their qualified names differ). The request
    is read in NFKC, and `ＡＢＣ` found `ABC` first, as did a decomposed `café` the composed one."""
    pairs = [("ABC", "ＡＢＣ"), ("café", "cafe\u0301"), ("Ⅻ", "XII")]
    tools = [{"server": "s", "name": name, "description": "Same thing"} for pair in pairs for name in pair]
    assert (await client.post("/tools", json={"tools": tools})).json()["errors"] == []
    for pair in pairs:
        for name in pair:
            results = (await client.post("/search", json={"query": name, "k": 2})).json()["results"]
            assert [r["tool"] for r in results] == [name, next(n for n in pair if n != name)], name
