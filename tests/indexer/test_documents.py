"""Field texts, identifier splitting, content hashes and the lexical encoder."""

from __future__ import annotations

from indexer.documents import build_document, content_hash, joined_words, normalize_name_key, split_identifier
from indexer.lexical import Bm25Encoder, tokenize
from indexer.tools import ToolDefinition


def test_identifiers_split_on_every_convention() -> None:
    assert split_identifier("get_currentTime.v2-beta") == "get current time v2 beta"
    assert split_identifier("HTTPServerError") == "http server error"
    assert split_identifier("read-file") == "read file"


def test_words_without_capitals_split_on_separators_only_and_capitals_anywhere_still_split() -> None:
    assert split_identifier("list the files, please") == "list the files, please"
    assert split_identifier("straße_größe") == "straße größe"  # no capital: kept as written
    assert split_identifier("getHTTPResponse") == "get http response"
    assert split_identifier("Ärger_machen ÄrgerMachen") == "ärger machen ärger machen"
    assert split_identifier("größeÄrger") == "größeärger"  # a boundary is before an ASCII capital only
    assert split_identifier("") == "" and split_identifier("__--") == ""


def test_name_key_ignores_case_and_separators() -> None:
    assert normalize_name_key("Get_Current-Time") == normalize_name_key("get current time") == "getcurrenttime"


def test_params_text_covers_names_descriptions_enums_and_nested_properties() -> None:
    tool = ToolDefinition(server="s", name="book_flight", description="Book a flight", input_schema={
        "type": "object",
        "properties": {
            "cabinClass": {"type": "string", "enum": ["economy", "business"], "description": "Seat class"},
            "passenger": {"type": "object", "properties": {"firstName": {"type": "string", "description": "Given"}}},
        },
    })
    doc = build_document(tool)
    assert doc.name == "book flight"
    assert "cabin class: Seat class: one of economy, business" in doc.params
    assert "passenger first name: Given" in doc.params
    assert doc.qualified_name == "s__book_flight"


def test_quoted_example_values_leave_the_params_text_and_domain_examples_stay() -> None:
    tool = ToolDefinition(server="time", name="convert_time", input_schema={
        "type": "object",
        "properties": {
            "target_timezone": {"type": "string", "description": "IANA timezone name (e.g., 'Asia/Tokyo', 'UTC')."},
            "evidence": {"type": "string", "description": "Kind of evidence (e.g., DNA, fingerprints)"},
        },
    })
    params = build_document(tool).params
    assert "Tokyo" not in params and "target timezone: IANA timezone name." in params
    assert "evidence: Kind of evidence (e.g., DNA, fingerprints)" in params


def test_the_document_format_is_part_of_the_content_hash(monkeypatch) -> None:
    import indexer.tools

    before = content_hash(ToolDefinition(server="s", name="x", description="d"))
    monkeypatch.setattr(indexer.tools, "DOCUMENT_FORMAT", indexer.tools.DOCUMENT_FORMAT + 1)
    assert content_hash(ToolDefinition(server="s", name="x", description="d")) != before  # re-embedded on upgrade


def test_empty_description_and_schema_fall_back_to_the_name() -> None:
    doc = build_document(ToolDefinition(server="s", name="ping"))
    assert doc.description == "ping" and doc.params == "ping"


def test_content_hash_changes_with_any_indexed_field() -> None:
    base = ToolDefinition(server="s", name="x", description="d")
    assert content_hash(base) == content_hash(ToolDefinition(server="s", name="x", description="d"))
    assert content_hash(base) != content_hash(base.model_copy(update={"description": "e"}))
    assert content_hash(base) != content_hash(base.model_copy(update={"tags": ("t",)}))


def test_tokenize_stems_drops_stop_words_and_handles_cjk() -> None:
    assert tokenize("Searching the papers") == ["search", "paper"]
    assert "天気" in tokenize("東京の天気")


def test_a_camel_case_word_keeps_its_joined_form_and_meets_its_word_in_any_case() -> None:
    assert joined_words("GitHub") == ["github"] and joined_words("getHTTPResponse_v2") == ["gethttpresponse"]
    assert joined_words("github GITHUB Github get_current_time") == []  # no boundary: nothing to join
    assert tokenize("GitHub") == ["git", "hub", "github"]
    assert tokenize("github") == tokenize("GITHUB") == tokenize("Github") == ["github"]
    # A document's GitHub matches a request's in every case, and a name's words a request's in any convention.
    document = set(tokenize("Create a new issue in a GitHub repository"))
    for request in ("create a github issue", "CREATE A GITHUB ISSUE", "Create A Github Issue", "GitHub issue"):
        assert "github" in document & set(tokenize(request)), request
    named = set(tokenize("get_current_time"))
    assert named == {"current", "time"}  # `get` is a stop-word
    assert named <= set(tokenize("getCurrentTime")) and named == set(tokenize("GET_CURRENT_TIME"))


def test_the_lexical_text_keeps_the_name_as_written() -> None:
    doc = build_document(ToolDefinition(server="s", name="listGitHubRepos", description="Lists repositories"))
    assert doc.name == "list git hub repos"  # the dense fields read the words
    assert "listgithubrepo" in tokenize(doc.lexical) and "hub" in tokenize(doc.lexical)


def test_query_counts_each_term_once_and_documents_saturate() -> None:
    encoder = Bm25Encoder()
    query = encoder.encode_query("time time time zone")
    assert len(query.indices) == 2 and query.values == [1.0, 1.0]
    doc = encoder.encode_document("time time zone")
    weights = dict(zip(doc.indices, doc.values, strict=True))
    single = encoder.encode_document("time zone")
    assert max(weights.values()) < 2 * max(single.values)
    assert doc.indices == sorted(doc.indices)


def test_a_word_keeps_its_combining_marks_and_unspaced_scripts_are_read_as_letter_groups() -> None:
    """`\\w` has no combining mark: a Devanagari vowel sign or a decomposed accent cut the word there (`भेजें` was
    `भ` and `ज`, both dropped; `cre\\u0301er` was `cre`, `er`); a Thai sentence, one run of letters, was its stray
    pairs between vowel signs."""
    assert tokenize("प्राप्तकर्ता को ईमेल भेजें") == ["प्राप्तकर्ता", "को", "ईमेल", "भेजें"]
    assert tokenize("cre\u0301er") == ["cre\u0301er"]
    assert set(tokenize("ส่งอีเมล")) <= set(tokenize("ส่งอีเมลถึงผู้รับ"))
    assert "ส่ง" in tokenize("ส่งอีเมล") and not {"ส", "่"} & set(tokenize("ส่งอีเมล"))  # no lone letter or mark


def test_a_tool_s_texts_are_read_in_nfkc_as_a_request_is() -> None:
    """Full-width letters, half-width katakana, decomposed accents: the request is read in NFKC
    (indexer/query_text.py), so the document is too, its embedded fields and its BM25 terms."""
    tool = ToolDefinition(
        server="s",
        name="ｃｈｅｃｋ_ﾃｽﾄ",
        description="Ｃｏｍｐｕｔｅ ｔｈｅ ｃｈｅｃｋｓｕｍ, cre\u0301er un e\u0301ve\u0301nement",
    )
    doc = build_document(tool)
    assert doc.name == "check テスト"
    assert doc.description == "Compute the checksum, créer un événement"
    assert {"check", "テス", "スト", "comput", "checksum", "créer", "événement"} <= set(tokenize(doc.lexical))
    assert "_" not in "".join(tokenize(doc.lexical))  # `check_テスト`: its parts, not letter pairs across `_`


def test_an_exact_name_key_reads_the_name_as_the_search_reads_a_request() -> None:
    assert normalize_name_key("ＡＢＣ") == normalize_name_key("ABC") == "abc"
    assert normalize_name_key("cafe\u0301_menu") == normalize_name_key("Café Menu") == "cafémenu"
    assert normalize_name_key("🔥_fire_alarm") == normalize_name_key("fire-alarm")
    assert normalize_name_key("math.gcd") == normalize_name_key("MathGcd") == "mathgcd"
