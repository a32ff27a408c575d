"""The tool model, qualified names and validation of registrations."""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any

import jsonschema_rs
from pydantic import BaseModel, ConfigDict, Field

from indexer.documents import DOCUMENT_FORMAT
from indexer.json_pointer import pointer_token
from indexer.json_values import (
    INTEGER_RANGE,
    MAX_SCHEMA_DEPTH,
    annotations_problem,
    depth,
    json_type,
    mcp_annotation_problem,
    outsized_integer,
)
from indexer.screening import definition_hash, find_hidden

QUALIFIED_NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SEPARATOR = "__"
MAX_NAME_CHARS = 256
MAX_SERVER_CHARS = 128
MAX_DESCRIPTION_CHARS = 16_000
MAX_SCHEMA_BYTES = 128_000
MAX_TAGS = 32
MAX_TAG_CHARS = 64
# Unknown keys a batch names, the others counted: 100,000 stray keys (a 1.3 MB body) were 21.5 MB of warnings.
MAX_WARNINGS = 20
# The keys of a tool object: Toolscout's, then those of a catalog line (`id`) and of an MCP tools/list, taken and
# not stored. Any other is named in a registration's warnings (a misspelt `descripton` registers the tool without
# its description: the caller hears of it); an upstream's own listing may carry more (MCP objects are open).
TOOL_KEYS = ("server", "name", "description", "input_schema", "inputSchema", "annotations", "tags")
OTHER_TOOL_KEYS = ("id", "title", "outputSchema", "icons", "_meta", "execution")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]+")
_RUNS_OF_UNDERSCORES = re.compile(r"__+")


class ToolDefinition(BaseModel):
    """One tool of one server, as registered (MCP `tools/list` shape plus server and tags)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    server: str
    name: str
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=dict, alias="inputSchema")
    annotations: dict[str, Any] = Field(default_factory=dict)
    tags: tuple[str, ...] = ()

    # Computed once per tool (a registration reads both several times): the model is frozen, and model_copy
    # drops them (below), so they always describe the fields.
    @cached_property
    def qualified_name(self) -> str:
        """`<server>__<tool>`, valid for MCP clients."""
        return qualify(self.server, self.name)

    @cached_property
    def content_hash(self) -> str:
        """SHA-256 of everything that affects the index entry of the tool, the document format included."""
        canonical = json.dumps(
            {
                "document_format": DOCUMENT_FORMAT,
                "server": self.server,
                "name": self.name,
                "description": self.description,
                "input_schema": self.input_schema,
                "annotations": self.annotations,
                "tags": list(self.tags),
            },
            sort_keys=True,
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(canonical.encode()).hexdigest()

    @cached_property
    def definition_hash(self) -> str:
        """SHA-256 of what the upstream says the tool does (description, input schema, annotations): unlike
        content_hash, not moved by tags or the index's document format."""
        return definition_hash(self.description, self.input_schema, self.annotations)

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> ToolDefinition:
        copy = super().model_copy(update=update, deep=deep)
        for cached in ("qualified_name", "content_hash", "definition_hash"):
            copy.__dict__.pop(cached, None)
        return copy


def _slug(text: str) -> str:
    return _INVALID_CHARS.sub("_", text.strip()).strip("_") or "x"


def normalize_server_id(server: str) -> str:
    """A server id made of MCP-safe characters (`Chemical Engineering/Forensics` -> `Chemical_Engineering_Forensics`);
    ids past 48 characters are cut and suffixed with a hash."""
    slug = _slug(server)
    if len(slug) <= 48:
        return slug
    return slug[:39] + "-" + hashlib.sha1(server.encode()).hexdigest()[:8]


@lru_cache(maxsize=262_144)  # a registration reads each qualified name a dozen times
def qualify(server: str, name: str) -> str:
    """The qualified name of a tool; invalid characters become `_`, names over 64 characters are cut and
    suffixed with a hash of the original so that the mapping stays deterministic.

    A name that loses characters is suffixed with a hash of itself too, so that names which differ only there stay
    two tools: `math.gcd` and `math_gcd` of one server (both in public catalogs) were one qualified name, and the
    second was refused (or, read from a dataset file, renamed so that its exact name no longer found it); every
    all-Chinese name was `x`."""
    # A tool's part never holds the separator: server `a`'s tool `b__c` would be `a__b__c`, server `a__b`'s tool `c`
    # (the first to register kept the name, and an allow pattern `a__b__*` granted an upstream's look-alike).
    slug = _RUNS_OF_UNDERSCORES.sub("_", _slug(name))
    candidate = f"{normalize_server_id(server)}{SEPARATOR}{slug}"
    if QUALIFIED_NAME_RE.match(candidate) and candidate == f"{server}{SEPARATOR}{name}":
        return candidate
    if slug != name.strip():
        candidate = f"{candidate[:55]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    if len(candidate) <= 64:
        return candidate
    digest = hashlib.sha1(f"{server}{SEPARATOR}{name}".encode()).hexdigest()[:8]
    return candidate[:55] + "-" + digest


@dataclass(frozen=True)
class ToolProblem:
    """What is wrong with one tool of a registration batch."""

    index: int
    tool: str
    field: str
    reason: str
    kind: str = "invalid"  # invalid | duplicate | conflict
    at: str = ""  # the JSON pointer of the value inside the field, when the problem is one value

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "tool": self.tool,
            "pointer": f"/{self.index}/{pointer_token(self.field)}{self.at}"
            if self.field or self.kind == "ignored"
            else f"/{self.index}",
            "field": self.field,
            "reason": self.reason,
            "kind": self.kind,
        }


@dataclass
class ValidatedBatch:
    """The tools of a batch that passed validation, and the problems of the others."""

    tools: list[ToolDefinition] = field(default_factory=list)
    problems: list[ToolProblem] = field(default_factory=list)
    warnings: list[ToolProblem] = field(default_factory=list)  # keys no tool has, ignored (kind "ignored")
    more_warnings: int = 0  # unknown keys past MAX_WARNINGS, counted only


def _outsized_problem(index: int, label: str, key: str, value: Any) -> ToolProblem | None:
    """A value of the tool's payload holding an integer the index cannot keep exactly, refused where it is
    rather than stored rounded."""
    found = outsized_integer(value)
    if found is None:
        return None
    at, number = found
    shown = str(number) if number.bit_length() <= 200 else f"an integer of {number.bit_length()} bits"
    reason = (
        f"{key} holds {shown} at {at or '/'}, beyond the 64-bit integers the catalog keeps exactly "
        f"({INTEGER_RANGE[0]} to {INTEGER_RANGE[1]}); write it as a float (with an exponent) or a string"
    )
    return ToolProblem(index, label, key, reason, at=at)


def _check_schema(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return f"input_schema must be a JSON object, not {json_type(schema)}"
    if depth(schema) > MAX_SCHEMA_DEPTH:
        return f"input_schema nests deeper than {MAX_SCHEMA_DEPTH} levels (MAX_SCHEMA_DEPTH)"
    try:
        canonical = json.dumps(schema, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError):
        return "input_schema must be plain JSON"
    if len(canonical) > MAX_SCHEMA_BYTES:
        return f"input_schema is larger than {MAX_SCHEMA_BYTES} bytes (MAX_SCHEMA_BYTES)"
    if schema == {}:
        return None
    return _check_schema_text(canonical)


# Verdicts by the SHA-256 of the schema's canonical text: keyed by the text itself, 65,536 schemas of up to 128 KB
# (an upstream server lists what it likes, again at each tools/list_changed) could hold 8 GB.
_SCHEMA_VERDICTS: OrderedDict[bytes, str | None] = OrderedDict()
_SCHEMA_VERDICTS_SIZE = 65_536
_SCHEMA_VERDICTS_LOCK = threading.Lock()


def _check_schema_text(canonical: str) -> str | None:
    """Metaschema validation (JSON Schema 2020-12), each distinct schema once per process. jsonschema-rs checks a
    schema in ~3 us where the pure-Python validator took ~1.5 ms (15 s of a 10k-tool registration)."""
    key = hashlib.sha256(canonical.encode(errors="surrogatepass")).digest()
    with _SCHEMA_VERDICTS_LOCK:
        if key in _SCHEMA_VERDICTS:
            _SCHEMA_VERDICTS.move_to_end(key)
            return _SCHEMA_VERDICTS[key]
    verdict = _schema_verdict(canonical)
    with _SCHEMA_VERDICTS_LOCK:
        _SCHEMA_VERDICTS[key] = verdict
        while len(_SCHEMA_VERDICTS) > _SCHEMA_VERDICTS_SIZE:
            _SCHEMA_VERDICTS.popitem(last=False)
    return verdict


def _schema_verdict(canonical: str) -> str | None:
    schema = json.loads(canonical)
    dialect = schema.pop("$schema", None)
    # jsonschema-rs would fetch an unknown `$schema` URL over the network: the dialect is checked as a string
    # and validation is always 2020-12, as with the Python validator before.
    if dialect is not None and not isinstance(dialect, str):
        return "not a valid JSON Schema at $schema: must be a string (a URI)"
    try:
        jsonschema_rs.meta.validate(schema)
    except jsonschema_rs.ValidationError as exc:
        where = "/".join(str(p) for p in exc.instance_path) or "(root)"
        return f"not a valid JSON Schema at {where}: {str(exc).splitlines()[0]}"
    try:
        # Compiled as /execute will use it: every `$ref` must resolve within the schema (a remote one is never
        # fetched, here or at a call) and every `pattern` must be a regular expression.
        jsonschema_rs.Draft202012Validator(schema, retriever=_no_retrieval)
    except jsonschema_rs.ValidationError as exc:
        return f"not a usable JSON Schema: {_compile_problem(str(exc))}"
    declared = schema.get("type")
    if declared is not None and declared != "object":
        return f'input_schema must describe an object (type "object"), not {declared!r}'
    return None


def _no_retrieval(uri: str) -> Any:
    raise ValueError(f"$ref {uri} is outside the schema; remote references are never fetched")


def _compile_problem(message: str) -> str:
    first = message.splitlines()[0]
    if "retrieving it failed: " in first:  # jsonschema-rs wraps the retriever's refusal
        return first.split("retrieving it failed: ", 1)[1].removeprefix("ValueError: ")
    return first


def _mistyped(index: int, label: str, raw: dict[str, Any]) -> ToolProblem | None:
    """The first field of the tool given a value of the wrong JSON type (null counts as left out)."""
    wanted = {
        "name": (str, "a string"), "server": (str, "a string"), "description": (str, "a string"),
        "annotations": (dict, "an object"), "tags": (list, "an array of strings"),
    }
    for key, (kind, described) in wanted.items():
        value = raw.get(key)
        if value is not None and not isinstance(value, kind):
            return ToolProblem(index, label, key, f"{key} must be {described}, not {json_type(value)}")
    return None


def note_unknown_keys(batch: ValidatedBatch, index: int, raw: Any) -> None:
    """Warn of the keys of a tool object that no tool has (ignored, the tool kept), MAX_WARNINGS in a batch."""
    if not isinstance(raw, dict):
        return
    label = raw["name"] if isinstance(raw.get("name"), str) and raw["name"] else f"#{index}"
    reason = f"not a field of a tool, ignored (fields: {', '.join(TOOL_KEYS)})"
    unknown = [str(key) for key in raw if key not in (*TOOL_KEYS, *OTHER_TOOL_KEYS)]
    room = MAX_WARNINGS - len(batch.warnings)
    batch.warnings += [ToolProblem(index, label, key, reason, "ignored") for key in unknown[:room]]
    batch.more_warnings += max(len(unknown) - room, 0)


def validate_tool(index: int, raw: Any, default_server: str | None = None) -> ToolDefinition | ToolProblem:
    """Check one raw registration; return the tool or the first problem found."""
    if not isinstance(raw, dict):
        return ToolProblem(index, "?", "", f"each tool must be a JSON object, not {json_type(raw)}")
    name = raw.get("name")
    label = name if isinstance(name, str) and name else f"#{index}"
    if (mistyped := _mistyped(index, label, raw)) is not None:
        return mistyped
    if not isinstance(name, str) or not name.strip():
        return ToolProblem(index, label, "name", "name is missing or empty")
    # PostgreSQL text cannot hold NUL: a tool with one made the whole batch a 500.
    for key in ("name", "server", "description"):
        if isinstance(raw.get(key), str) and "\x00" in raw[key]:
            return ToolProblem(index, label.replace("\x00", ""), key, f"{key} must not contain NUL (U+0000) characters")
    if len(name) > MAX_NAME_CHARS:
        return ToolProblem(index, label[:80], "name", f"name is longer than {MAX_NAME_CHARS} characters")
    server = raw.get("server", default_server)
    if not isinstance(server, str) or not server.strip():
        return ToolProblem(index, label, "server", "server is missing or empty")
    if len(server) > MAX_SERVER_CHARS:
        return ToolProblem(index, label, "server", f"server is longer than {MAX_SERVER_CHARS} characters")
    description = raw.get("description") or ""
    if len(description) > MAX_DESCRIPTION_CHARS:
        return ToolProblem(
            index, label, "description", f"description is longer than {MAX_DESCRIPTION_CHARS} characters"
        )
    schema_key = "input_schema" if "input_schema" in raw else "inputSchema"
    schema = raw.get(schema_key)
    schema = {} if schema is None else schema
    problem = _check_schema(schema)
    if problem:
        return ToolProblem(index, label, schema_key, problem)
    annotations = raw.get("annotations") or {}
    if problem := annotations_problem(annotations):
        return ToolProblem(index, label, "annotations", problem)
    if mistyped_hint := mcp_annotation_problem(annotations):
        return ToolProblem(index, label, "annotations", mistyped_hint[1], at=mistyped_hint[0])
    for key, value in ((schema_key, schema), ("annotations", annotations)):
        if (outsized := _outsized_problem(index, label, key, value)) is not None:
            return outsized
    tags = raw.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) and 0 < len(t) <= MAX_TAG_CHARS for t in tags):
        return ToolProblem(index, label, "tags", f"tags must be a list of strings of 1-{MAX_TAG_CHARS} characters")
    if len(tags) > MAX_TAGS:
        return ToolProblem(index, label, "tags", f"at most {MAX_TAGS} tags")
    # Text a reviewer cannot see but a model reads (ASCII smuggled in Unicode tags, bidirectional overrides).
    fields = {"name": name, "description": description, schema_key: schema, "annotations": annotations, "tags": tags}
    if (hidden := find_hidden(fields)) is not None:
        return ToolProblem(index, label, hidden.field, hidden.reason, at=hidden.at)
    return ToolDefinition(
        server=server.strip(),
        name=name.strip(),
        description=description,
        input_schema=schema,
        annotations=annotations,
        tags=tuple(dict.fromkeys(tags)),
    )


def validate_batch(
    raw_tools: list[Any], default_server: str | None = None, *, warn_unknown_keys: bool = True
) -> ValidatedBatch:
    """Validate a registration batch; bad tools and duplicates are reported, the others kept.

    Two tools that get the same qualified name: the first wins, the second is reported as a conflict
    (or a duplicate when server and name are identical)."""
    batch = ValidatedBatch()
    seen: dict[str, ToolDefinition] = {}
    for index, raw in enumerate(raw_tools):
        if warn_unknown_keys:
            note_unknown_keys(batch, index, raw)
        result = validate_tool(index, raw, default_server)
        if isinstance(result, ToolProblem):
            batch.problems.append(result)
            continue
        qualified = result.qualified_name
        first = seen.get(qualified)
        if first is not None:
            same = (first.server, first.name) == (result.server, result.name)
            reason = (
                f"duplicate of an earlier tool in this batch ({qualified})"
                if same
                else f"qualified name {qualified} is already taken by {first.server}/{first.name}"
            )
            batch.problems.append(ToolProblem(index, result.name, "name", reason, "duplicate" if same else "conflict"))
            continue
        seen[qualified] = result
        batch.tools.append(result)
    return batch
