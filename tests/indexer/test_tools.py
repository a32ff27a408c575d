"""Tool model, qualified names and validation of registrations."""

from __future__ import annotations

import pytest

from indexer.tools import QUALIFIED_NAME_RE, qualify, validate_batch
from service.mcp.render import catalog_tool
from service.policy.permissions import parse_permissions


def test_qualified_name_joins_server_and_tool() -> None:
    assert qualify("time", "get_current_time") == "time__get_current_time"


@pytest.mark.parametrize(
    ("server", "name"),
    [
        ("Chemical Engineering/Forensic engineering", "analyzeEvidence"),
        ("a" * 90, "b" * 90),
        ("srv", "do.thing v2"),
        ("日本", "天気"),
    ],
)
def test_invalid_or_long_names_are_normalised_deterministically(server: str, name: str) -> None:
    first = qualify(server, name)
    assert QUALIFIED_NAME_RE.match(first), first
    assert qualify(server, name) == first


def test_long_names_that_differ_only_at_the_end_stay_distinct() -> None:
    assert qualify("s", "x" * 80 + "1") != qualify("s", "x" * 80 + "2")


def test_one_bad_tool_does_not_lose_the_others() -> None:
    batch = validate_batch(
        [
            {"server": "a", "name": "good", "input_schema": {"type": "object"}},
            {"server": "a", "description": "no name"},
            {"server": "a", "name": "scalar", "input_schema": {"type": "string"}},
            {"server": "a", "name": "broken", "input_schema": {"type": "object", "properties": {"x": {"type": 3}}}},
            {"server": "a", "name": "huge", "description": "x" * 20_000},
            {"server": "a", "name": "good"},
            "not an object",
        ]
    )
    assert [t.name for t in batch.tools] == ["good"]
    problems = {(p.index, p.field, p.kind) for p in batch.problems}
    assert problems == {
        (1, "name", "invalid"),
        (2, "input_schema", "invalid"),
        (3, "input_schema", "invalid"),
        (4, "description", "invalid"),
        (5, "name", "duplicate"),
        (6, "", "invalid"),
    }
    broken = next(p for p in batch.problems if p.index == 3)
    assert "properties/x/type" in broken.reason
    assert batch.problems[0].as_dict()["pointer"] == "/1/name"


def test_colliding_qualified_names_first_wins_second_is_a_conflict() -> None:
    batch = validate_batch([{"server": "a b", "name": "x"}, {"server": "a_b", "name": "x"}])
    assert [(t.server, t.name) for t in batch.tools] == [("a b", "x")]
    (problem,) = batch.problems
    assert problem.kind == "conflict" and "a_b__x" in problem.reason


def test_a_tool_name_holding_the_separator_never_takes_another_servers_qualified_name() -> None:
    """Server `a` listing `b__c` was `a__b__c`, the name of server `a__b`'s tool `c`: the first to register kept it,
    and an allow pattern `a__b__*` admitted the other server's tool."""
    assert qualify("a__b", "c") == "a__b__c"
    assert qualify("a", "b__c").startswith("a__b_c-") and qualify("a", "b___c") != qualify("a", "b__c")
    batch = validate_batch([{"server": "a", "name": "b__c"}, {"server": "a__b", "name": "c"}])
    assert not batch.problems and [t.qualified_name.rpartition("__")[0] for t in batch.tools] == ["a", "a__b"]
    assert PERMISSIONS_A_B.permits({"dev"}, "a__b__c", "a__b", "c")
    assert not PERMISSIONS_A_B.permits({"dev"}, qualify("a", "b__c"), "a", "b__c")


PERMISSIONS_A_B = parse_permissions({"roles": {"dev": {"allow": ["a__b__*"]}}})


def test_empty_schema_is_accepted_and_mcp_spelling_too() -> None:
    batch = validate_batch(
        [
            {"server": "a", "name": "x", "input_schema": {}},
            {"server": "a", "name": "y", "inputSchema": {"type": "object", "properties": {"q": {"type": "string"}}}},
        ]
    )
    assert not batch.problems
    assert batch.tools[1].input_schema["properties"]["q"]["type"] == "string"


def test_schemas_are_checked_against_2020_12_whatever_their_dialect_and_nothing_is_fetched() -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    batch = validate_batch(
        [
            {
                "server": "a",
                "name": "remote",
                "input_schema": {"$schema": f"http://127.0.0.1:{port}/meta", "type": "object"},
            },
            {
                "server": "a",
                "name": "draft7",
                "input_schema": {
                    "$schema": "http://json-schema.org/draft-07/schema#",
                    "type": "object",
                    "prefixItems": 3,
                },
            },
            {
                "server": "a",
                "name": "nested",
                "input_schema": {"type": "object", "properties": {"q": {"type": "strin"}}},
            },
            {"server": "a", "name": "dialect", "input_schema": {"$schema": 7, "type": "object"}},
        ]
    )
    with pytest.raises(BlockingIOError):
        listener.accept()  # no connection was attempted
    listener.close()
    assert [t.name for t in batch.tools] == ["remote"]
    reasons = {p.as_dict()["pointer"]: p.reason for p in batch.problems}
    assert "prefixItems" in reasons["/1/input_schema"]  # 2020-12 rules, as before
    assert "properties/q/type" in reasons["/2/input_schema"]
    assert "$schema" in reasons["/3/input_schema"]


@pytest.mark.parametrize(
    ("tool", "field", "reason"),
    [
        ({"server": "s", "name": 123}, "name", "name must be a string, not a number"),
        ({"server": "s", "name": ""}, "name", "name is missing or empty"),
        ({"server": "s", "name": "   "}, "name", "name is missing or empty"),
        ({"server": ["s"], "name": "t"}, "server", "server must be a string, not an array"),
        ({"server": "s", "name": "t", "description": []}, "description", "description must be a string, not an array"),
        ({"server": "s", "name": "t", "description": 0}, "description", "description must be a string, not a number"),
        (
            {"server": "s", "name": "t", "input_schema": "x"},
            "input_schema",
            "input_schema must be a JSON object, not a string",
        ),
        ({"server": "s", "name": "t", "annotations": []}, "annotations", "annotations must be an object, not an array"),
        ({"server": "s", "name": "t", "tags": ""}, "tags", "tags must be an array of strings, not a string"),
        ({"server": "s", "name": "t", "tags": False}, "tags", "tags must be an array of strings, not a boolean"),
    ],
)
def test_a_field_of_the_wrong_type_is_refused_where_it_is(
    tool: dict[str, object], field: str, reason: str
) -> None:
    """An empty list or 0 was taken for "no description" (`or ""`): the tool registered without a word."""
    batch = validate_batch([{"server": "s", "name": "fine"}, tool])
    assert [t.name for t in batch.tools] == ["fine"]
    assert [(p.as_dict()["pointer"], p.reason) for p in batch.problems] == [(f"/1/{field}", reason)]


def test_an_annotation_mcp_defines_given_another_type_is_refused_where_it_is() -> None:
    """MCP's ToolAnnotations refused a title of 5 or a hint of "maybe": registered, such a tool made every tools/list
    of a full, grouped or dynamic front end fail (service/mcp/render.py catalog_tool). Other keys, and null, pass."""
    tools = [
        {"server": "s", "name": "titled", "annotations": {"title": 5}},
        {"server": "s", "name": "maybe", "annotations": {"title": "M", "readOnlyHint": "maybe"}},
        {"server": "s", "name": "listed", "annotations": {"openWorldHint": [True]}},
        {"server": "s", "name": "fine", "annotations": {"title": None, "destructiveHint": False, "x": "anything"}},
    ]
    batch = validate_batch(tools)
    assert [t.name for t in batch.tools] == ["fine"]
    assert [(p.as_dict()["pointer"], p.reason) for p in batch.problems] == [
        ("/0/annotations/title", "annotations title must be a string (MCP), not a number"),
        ("/1/annotations/readOnlyHint", "annotations readOnlyHint must be a boolean (MCP), not a string"),
        ("/2/annotations/openWorldHint", "annotations openWorldHint must be a boolean (MCP), not an array"),
    ]
    catalog_tool({"name": "s__fine", "annotations": batch.tools[0].annotations})  # as the front end lists it
    # A row stored before this check is listed without its hints rather than failing the whole listing.
    stored = catalog_tool({"name": "s__titled", "description": "d", "annotations": {"title": 5, "readOnlyHint": 1}})
    assert (stored.name, stored.description, stored.annotations) == ("s__titled", "d", None)


def test_a_key_no_tool_has_is_a_warning_and_the_keys_of_catalog_lines_and_mcp_listings_are_taken() -> None:
    """A misspelt `descripton` registers the tool without its description: the caller hears of it. A catalog
    line's `id` and what an MCP tools/list adds are part of the formats the registration takes."""
    listed = {
        "server": "s", "name": "t", "id": "7", "title": "T", "inputSchema": {"type": "object"},
        "outputSchema": {"type": "object"}, "icons": [], "_meta": {"x": 1}, "execution": {"taskSupport": "forbidden"},
    }
    batch = validate_batch([listed, {"server": "s", "name": "u", "descripton": "typo", "a/b": 1}])
    assert [t.name for t in batch.tools] == ["t", "u"] and batch.problems == []
    assert [(w.as_dict()["pointer"], w.kind, w.reason) for w in batch.warnings] == [
        (f"/1/{key}", "ignored", REASON) for key in ("descripton", "a~1b")
    ]
    assert validate_batch([{"server": "s", "name": "u", "later": 1}], warn_unknown_keys=False).warnings == []


REASON = (
    "not a field of a tool, ignored "
    "(fields: server, name, description, input_schema, inputSchema, annotations, tags)"
)
