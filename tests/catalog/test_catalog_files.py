"""Reading catalogs from JSON Lines: the description field a tool is indexed with."""

from __future__ import annotations

import json
from pathlib import Path

from service.catalog.files import load_catalog_file


def test_a_jsonl_tool_is_described_by_every_description_field_of_its_line(tmp_path: Path) -> None:
    path = tmp_path / "catalog.jsonl"
    lines = [
        {
            "id": "timeport",
            "name": "timeport",
            "description": "A time-travel game.",
            "description_for_model": "Start the game in a moment in history.",
            "name_for_human": "Timeport",
        },
        {"id": "plain", "name": "plain", "description": "Only a description."},
        {"id": "same", "name": "same", "description": "Says it once.", "long_description": "Says it once."},
        {"id": "bare", "name": "bare", "description_for_model": "Only the long one.", "description_x": 3},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    descriptions = [t["description"] for t in load_catalog_file(path).tools]
    assert descriptions == [
        "A time-travel game. Start the game in a moment in history.",
        "Only a description.",
        "Says it once.",
        "Only the long one.",
    ]


def test_a_catalog_file_that_is_not_utf8_is_a_bad_request_naming_the_line_and_a_dataset_nan_is_null(
    tmp_path: Path,
) -> None:
    """NaN refused the whole dataset file (every tool lost to an evaluation); it is null, as an MCP client would
    send it, never float("nan"): here the schema it made invalid is left out, the tool kept."""
    import pytest

    from service.errors import BadRequest

    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"name": "ok"}\n{"name": "caf\xe9"}\n')
    with pytest.raises(BadRequest, match=r"latin.jsonl:2: not UTF-8 \(byte 0xe9 at offset 28\)"):
        load_catalog_file(latin)
    nan = tmp_path / "nan.jsonl"
    nan.write_text('{"name": "a", "input_schema": {"type": "object", "maximum": NaN, "minimum": 1e400}}\n')
    read = load_catalog_file(nan)
    assert [t["input_schema"] for t in read.tools] == [{}]
    assert read.repairs == ["nan.jsonl:1: a: read past NaN is not a JSON number; input_schema left out (not a valid "
                            "JSON Schema at maximum: null is not of type \"number\")"]
    listed = tmp_path / "server.json"
    listed.write_text('{"tools": [{"name": "a", "inputSchema": {"type": "object", "minimum": -Infinity}}]}')
    with pytest.raises(BadRequest, match=r"not valid JSON \(-Infinity is not a JSON number\)"):
        load_catalog_file(listed)


def test_a_dataset_schema_in_python_types_is_read_in_json_schema_types_and_what_cannot_be_is_left_out(
    tmp_path: Path,
) -> None:
    from indexer.tools import validate_batch

    path = tmp_path / "catalog.jsonl"
    lines = [
        {"name": "a", "input_schema": {"type": "object", "properties": {
            "city": {"type": "str", "required": True}, "n": {"type": "Int"},
            "tags": {"type": "List[str]", "items": "str"}, "o": "dict"}}},
        {"name": "b", "description": "y" * 20_000, "input_schema": {"type": "dict", "required": "q",
                                                                    "properties": {"q": {"type": "weird"}}}},
        {"name": "c", "input_schema": "none", "tags": "t1"},
        {"name": "d", "input_schema": {"properties": [{"name": "x", "type": "float", "description": "an x"}]}},
        {"name": "e", "input_schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "string", "pattern": "(["}}}},
        {"name": "g", "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    catalog = load_catalog_file(path)
    schemas = {t["name"]: t["input_schema"] for t in catalog.tools}
    assert schemas["a"] == {"type": "object", "required": ["city"], "properties": {
        "city": {"type": "string"}, "n": {"type": "integer"},
        "tags": {"type": "array", "items": {"type": "string"}}, "o": {"type": "object"}}}
    assert schemas["b"] == {"type": "object", "required": ["q"], "properties": {"q": {}}}
    assert schemas["c"] == {} and catalog.tools[2]["tags"] == ["t1"]
    assert schemas["d"] == {"properties": {"x": {"type": "number", "description": "an x"}}}
    assert schemas["e"] == {"type": "object", "properties": {"input": {"type": "array", "items": {"type": "string"}}}}
    assert schemas["f"] == {} and schemas["g"] == lines[6]["input_schema"]
    assert len(catalog.tools[1]["description"]) == 16_000
    assert [r.split(":")[1] for r in catalog.repairs] == ["1", "2", "3", "4", "5", "6"]  # g needed nothing
    assert catalog.repairs[5].endswith('f: input_schema left out (not a usable JSON Schema: "([" is not a "regex")')
    assert validate_batch(catalog.tools).problems == []


def test_a_dataset_line_with_invisible_characters_is_kept_without_them(tmp_path: Path) -> None:
    """Scraped text carries zero-width spaces and soft hyphens; the registration refuses them (tool poisoning), so a
    dataset's tool holding one was lost to every query that asked for it."""
    from indexer.tools import validate_batch

    path = tmp_path / "catalog.jsonl"
    line = {"name": "get\u200bWeather", "description": "Weather fore\u00adcast\ufeff for a city\x00",
            "input_schema": {"type": "object", "properties": {"ci\u200bty": {"type": "string",
                                                                              "description": "the \u2060city"}}}}
    path.write_text(json.dumps(line) + "\n" + json.dumps({"name": "b", "description": "\u200b" * 20_000 + "ok"}))
    catalog = load_catalog_file(path)
    first, second = catalog.tools
    assert (first["name"], first["description"]) == ("getWeather", "Weather forecast for a city")
    assert first["input_schema"] == {"type": "object", "properties": {"city": {"type": "string",
                                                                               "description": "the city"}}}
    assert second["description"] == "ok"
    assert catalog.repairs == ["catalog.jsonl:1: getWeather: invisible characters left out",
                               "catalog.jsonl:2: b: invisible characters left out"]
    assert validate_batch(catalog.tools).problems == []


def test_a_catalog_file_that_is_not_json_says_where(tmp_path: Path) -> None:
    """The parser's message alone named no place: `not valid JSON (Unterminated string starting at)`."""
    import pytest

    from service.errors import BadRequest

    lines = tmp_path / "catalog.jsonl"
    lines.write_text('{"name": "a", "description": "x"}\n{"broken\n')
    with pytest.raises(BadRequest) as caught:
        load_catalog_file(lines)
    assert caught.value.detail == f"{lines}:2: not valid JSON (Unterminated string starting at: column 2)"
    listed = tmp_path / "server.json"
    listed.write_text('{"tools": [\n  {"name": "a",}\n]}')
    with pytest.raises(BadRequest) as caught:
        load_catalog_file(listed)
    assert caught.value.detail == (
        f"{listed}: not valid JSON (Expecting property name enclosed in double quotes: line 2 column 16)"
    )


def test_a_dataset_field_of_the_wrong_json_type_is_named_in_the_repairs(tmp_path: Path) -> None:
    """A `description` of 5 or of a list registered the tool without one, a `name` of 123 took the line's id, an
    `annotations` list was dropped: all without a word."""
    path = tmp_path / "catalog.jsonl"
    lines = [
        {"id": "n1", "name": 123, "description": "Numbered"},
        {"id": "d1", "name": "counts", "description": 5},
        {"id": "d2", "name": "listed", "description": ["Two", "lines"], "annotations": ["x"]},
        {"id": "ok", "name": "fine", "description": "Fine", "annotations": {"readOnlyHint": True}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines))
    catalog = load_catalog_file(path)
    assert [(t["name"], t["description"], t["annotations"]) for t in catalog.tools] == [
        ("n1", "Numbered", {}), ("counts", "", {}), ("listed", "", {}), ("fine", "Fine", {"readOnlyHint": True})
    ]
    assert catalog.repairs == [
        "catalog.jsonl:1: n1: name was a number, not a string: the id used",
        "catalog.jsonl:2: counts: description was a number, not a string: left out",
        "catalog.jsonl:3: listed: description was an array, not a string: left out; annotations was an array, not an "
        "object: left out",
    ]


def test_a_json_lines_file_is_read_a_line_at_a_time(tmp_path: Path) -> None:
    """The whole text, its lines and their values were held at once, 2.4 times the file at the peak (a catalog of
    20,000 tools of 100 KB descriptions is 2.2 GB), where each tool keeps 16,000 characters of its description.
    Lines, a byte order mark and the place of a byte that is not UTF-8 read as before."""
    import tracemalloc

    import pytest

    from service.errors import BadRequest

    path = tmp_path / "long.jsonl"
    line = {"name": "t", "description": "word " * 60_000}
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(json.dumps({**line, "id": str(i)}) for i in range(100)).encode())
    size = path.stat().st_size
    tracemalloc.start()
    try:
        catalog = load_catalog_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(catalog.tools) == 100 and {len(t["description"]) for t in catalog.tools} == {16_000}
    assert catalog.line_ids == [str(i) for i in range(100)]
    assert peak < size / 4, (peak, size)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"name": "a"}\n\n{"name": "b\xff"}\n')
    with pytest.raises(BadRequest, match=r"bad.jsonl:3: not UTF-8 \(byte 0xff at offset 26\)"):
        load_catalog_file(bad)
