"""Spelling tiers of exact names and the verbs that lead tool names."""

from __future__ import annotations

import random
import string
import time

from indexer.documents import split_identifier
from indexer.index.base import SearchFilter
from indexer.names import (
    _PUNCTUATION,
    LEAD_CHARS,
    READ_VERBS,
    _leading_word,
    asks,
    lead_verb,
    name_verb,
    opposed_verbs,
    past_tense,
    query_stems,
    spelling_tier,
    without_framing,
)
from service.search.ranking import Candidate, apply_lead_verb, apply_name_verbs, rank
from service.search.retrieval import NameDirectory


def test_spelling_tier_prefers_the_exact_spelling_then_case_then_separators() -> None:
    assert spelling_tier("math_gcd", ["py__math_gcd", "math_gcd"]) == 0
    assert spelling_tier("Math_GCD", ["py__math_gcd", "math_gcd"]) == 1
    assert spelling_tier("math_gcd", ["py__math.gcd", "math.gcd"]) == 2
    # As written before its reading (NFKC): the name spelled so first, the others a tier later.
    assert spelling_tier("ABC", ["s__ABC-1a2b3c4d", "ＡＢＣ"], spelled="ＡＢＣ") == 0
    assert spelling_tier("ABC", ["s__ABC", "ABC"], spelled="ＡＢＣ") == 1
    assert spelling_tier("book_flight", ["t__book_flight", "book_flight"], spelled="`book_flight`") == 1
    assert spelling_tier("math_gcd", ["py__math_gcd", "math_gcd"], spelled=" math_gcd ") == 0


def test_the_tool_spelled_as_the_query_comes_first_among_look_alikes() -> None:
    directory = NameDirectory()
    directory.add("a__math_gcd", "math.gcd", "a", ())
    directory.add("b__math_gcd", "math_gcd", "b", ())
    directory.add("c__MathGcd", "MathGcd", "c", ())
    candidates = {
        "a__math_gcd": Candidate("a__math_gcd", 5.0),
        "b__math_gcd": Candidate("b__math_gcd", 1.0),
        "other": Candidate("other", 9.0),
    }
    for query, first in (("math_gcd", "b__math_gcd"), ("math.gcd", "a__math_gcd"), ("MathGcd", "c__MathGcd")):
        tiers = directory.exact_tiers(query, SearchFilter())
        assert set(tiers) == {"a__math_gcd", "b__math_gcd", "c__MathGcd"}  # all equal ignoring case and separators
        ranked = [c.name for c in rank(dict(candidates), tiers, 4)]
        assert ranked[0] == first, (query, ranked)
        assert ranked[-1] == "other"  # exact names, even with lower scores, stay before the rest


def test_among_equally_spelled_exact_names_the_fused_score_decides() -> None:
    candidates = {"x": Candidate("x", 1.0), "y": Candidate("y", 2.0)}
    assert [c.name for c in rank(candidates, {"x": 2, "y": 2}, 2)] == ["y", "x"]
    assert [c.name for c in rank(candidates, {"x": 0, "y": 2}, 2)] == ["x", "y"]


def test_name_verb_skips_the_server_prefix_and_stems() -> None:
    assert name_verb("git_commit", "git") == "commit"
    assert name_verb("slack_post_message", "slack") == "post"
    assert name_verb("getHealthWorkforce", "Health") == "get"
    assert name_verb("create_entities", "memory") == "creat"
    assert name_verb("git", "git") == "git"
    assert name_verb("x", "s") == ""


def test_a_verb_the_request_names_adds_its_weight() -> None:
    candidates = {
        "git__git_commit": Candidate("git__git_commit", 1.0),
        "git__git_diff_staged": Candidate("git__git_diff_staged", 1.1),
    }
    verbs = {"git__git_commit": "commit", "git__git_diff_staged": "diff"}
    apply_name_verbs(candidates, verbs, query_stems("commit my staged changes"), 0.2)
    assert candidates["git__git_commit"].score == 1.2
    assert candidates["git__git_commit"].signals == {"name_verb": 0.2}
    assert candidates["git__git_diff_staged"].score == 1.1


def test_the_lead_verb_is_the_first_word_once_the_framing_is_gone() -> None:
    assert lead_verb("commit my staged changes with a message") == "commit"
    assert lead_verb("Can you please help me commit my changes?") == "commit"
    assert lead_verb("Hi there! I'd like to create an issue") == "creat"  # stemmed as name verbs are
    assert lead_verb("please, list the branches") == "list"
    assert lead_verb("what time is it in Tokyo?") == ""  # a stop-word names no action
    assert lead_verb("Can you please") == ""
    assert lead_verb("") == ""


def test_the_lead_word_is_the_first_word_of_the_whole_head_split() -> None:
    """Only the words up to the first one are split: the same word as splitting the whole head (LEAD_CHARS)."""
    heads = [
        "___ commit my changes",  # a token that splits into no word: the next one leads
        "_-_ _ListFiles in the folder",
        "Please, getWeather for Paris",
        "Can you please help me to HTTPServer restart",
        "\u3000Ünïcode_Word first",
        "?! ... ,",
        "",
        "x" * 300 + " after the head",
    ]
    for text in heads:
        whole = split_identifier(_PUNCTUATION.sub(" ", without_framing(text[:LEAD_CHARS]))).split()
        assert _leading_word(text) == (whole[0] if whole else "")
    assert _leading_word("___ commit my changes") == "commit"
    assert _leading_word("Please, getWeather for Paris") == "get"
    assert _leading_word("?! ... ,") == ""


def test_show_me_and_tell_me_frame_a_request_and_name_no_action() -> None:
    """ "Show me the last commits" asks for the commits, not for `git_show`: neither the lead verb nor the name
    verbs read the framing (git_show was first by its name verb's 0.2 on the bundled catalog)."""
    assert lead_verb("show me the last commits of the repository") == ""
    assert "show" not in query_stems("show me the last commits of the repository")
    assert query_stems("Can you help me commit this") == frozenset({"commit", "this"})  # no "help"
    assert asks("Tell me what laws protect tenants") and not asks("Tell me the water quality of the lake")
    assert lead_verb("give me a random number") == "" and lead_verb("let me see the open issues") == ""
    assert lead_verb("show the contents of a file") == "show"  # no "me": the action itself


def test_a_past_form_says_what_happened_and_names_no_action() -> None:
    """ "the intern created a bunch of junk links ...; please remove the relation ..." put memory__create_relations
    before delete_relations on the bundled catalog by the name verb of "created" (3.505 against 3.314)."""
    assert [w for w in ("created", "added", "replied", "stopped", "listed", "staged") if not past_tense(w)] == []
    assert [w for w in ("embed", "need", "proceed", "speed", "hundred", "used", "red", "create") if past_tense(w)] == []
    assert query_stems("the intern created junk links, remove the relation") == frozenset(
        {"the", "intern", "junk", "links,", "remov", "relat"}
    )
    assert "creat" in query_stems("create the relation")


def test_the_lead_verb_bonus_goes_to_the_sibling_at_the_head_that_does_what_was_asked() -> None:
    candidates = {
        "git__git_commit": Candidate("git__git_commit", 1.0),
        "git__git_diff_staged": Candidate("git__git_diff_staged", 2.0),
        "find_agency": Candidate("find_agency", -1.0),  # 4th
        **{f"other_{i}": Candidate(f"other_{i}", 1.5) for i in range(1)},
    }
    verbs = {"git__git_commit": "commit", "git__git_diff_staged": "diff", "find_agency": "commit"}
    apply_lead_verb(candidates, verbs, frozenset({lead_verb("commit my staged changes")}), 1.2)
    assert candidates["git__git_commit"].signals == {"lead_verb": 1.2}
    assert candidates["git__git_commit"].score > candidates["git__git_diff_staged"].score
    assert candidates["find_agency"].score == -1.0  # not at the head: a common verb lifts nobody from below
    apply_lead_verb(candidates, verbs, frozenset(), 1.2)  # no lead verb: nothing moves
    assert candidates["git__git_commit"].score == 2.2


def test_a_question_asks_the_siblings_that_read() -> None:
    assert asks("what time is it in Tokyo?") and not asks("Can you tell me the time?")
    assert asks("Hi! Which branches exist?") and not asks("commit my changes")
    candidates = {
        "time__convert_time": Candidate("time__convert_time", 4.87),
        "time__get_current_time": Candidate("time__get_current_time", 4.79),
    }
    verbs = {"time__convert_time": "convert", "time__get_current_time": "get"}
    apply_lead_verb(candidates, verbs, READ_VERBS, 0.2, "question_read")
    assert candidates["time__get_current_time"].signals == {"question_read": 0.2}
    assert candidates["time__get_current_time"].score > candidates["time__convert_time"].score


def test_a_request_to_take_away_never_has_the_sibling_that_adds_first_nor_the_reverse() -> None:
    assert opposed_verbs("remove the relation between Alice and Acme") == opposed_verbs("Please delete Bob")
    assert "creat" in opposed_verbs("remove the relation") and "add" in opposed_verbs("undo staging of all files")
    assert "delet" in opposed_verbs("create an issue") and "remov" in opposed_verbs("Remember that Bob likes tea")
    assert opposed_verbs("what time is it?") == opposed_verbs("commit my changes") == frozenset()
    candidates = {
        "memory__create_relations": Candidate("memory__create_relations", 2.0),
        "memory__delete_relations": Candidate("memory__delete_relations", 1.9),
        "memory__delete_entities": Candidate("memory__delete_entities", 1.5),
        "memory__add_observations": Candidate("memory__add_observations", 1.0),  # 4th: not at the head
    }
    verbs = {"memory__create_relations": "creat", "memory__delete_relations": "delet",
             "memory__delete_entities": "delet", "memory__add_observations": "add"}
    apply_lead_verb(candidates, verbs, opposed_verbs("remove the relation between Alice and Acme"), -1.2, "opposed")
    assert candidates["memory__create_relations"].signals == {"opposed": -1.2}
    assert max(candidates.values(), key=lambda c: c.score).name == "memory__delete_relations"
    assert candidates["memory__add_observations"].signals == {}


def test_the_closest_names_of_a_large_catalog_cost_a_bounded_comparison() -> None:
    """A misspelt name is compared with a bounded set of names (its server's, else those nearest in length):
    difflib over all 100k names of a catalog took ~8 s of the event loop for one unknown name in /execute."""
    rng = random.Random(7)
    directory = NameDirectory()
    letters = string.ascii_lowercase + "_"
    for i in range(100_000):
        server = f"s{i % 2000}"
        name = "".join(rng.choice(letters) for _ in range(rng.randint(8, 30)))
        directory.add(f"{server}__{name}", name, server, ())
    directory.add("s12__get_weather_forecast", "get_weather_forecast", "s12", ())
    started = time.perf_counter()
    near = directory.closest("s12__get_wether_forecast")
    flat = directory.closest("get_wether_forecast")
    assert time.perf_counter() - started < 1.5
    assert near[0] == "s12__get_weather_forecast"
    assert len(flat) <= 5
