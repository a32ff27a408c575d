"""Fusion, multi-intent splitting and the exact-name ladder."""

from __future__ import annotations

import math

import pytest

from indexer.intents import split_intents, whole_from_parts
from service.search.ranking import (
    Candidate,
    apply_boosts,
    fuse,
    max_merge,
    rank,
    zscores,
)


def test_zscores_are_centred_and_missing_candidates_get_the_floor() -> None:
    normalised, floor = zscores({"a": 3.0, "b": 1.0})
    assert normalised == {"a": 1.0, "b": -1.0}
    assert floor == -1.0
    assert zscores({"a": 0.5, "b": 0.5}) == ({"a": 0.0, "b": 0.0}, 0.0)
    assert zscores({}) == ({}, 0.0)


def test_fuse_is_a_weighted_sum_over_the_union_of_candidates() -> None:
    fused = fuse({"name": {"a": 0.9, "b": 0.1}, "lexical": {"b": 5.0, "c": 1.0}}, {"name": 0.5, "lexical": 0.5})
    assert set(fused) == {"a", "b", "c"}
    assert fused["a"].signals == {"name": 0.5, "lexical": -0.5}
    assert fused["b"].score == pytest.approx(0.0)
    assert fused["a"].raw == {"name": 0.9}


def test_a_signal_whose_hits_score_alike_puts_them_a_level_above_the_tools_it_missed() -> None:
    """BM25 finding one tool (a word no other tool has) gave it 0, the same as every tool it did not find: its
    fused score came from the dense fields alone. Now its hits are +1 and the others -1, as two hits a step apart
    are; a signal that lists every candidate alike still adds nothing, and nothing is NaN."""
    weights = {"description": 0.45, "lexical": 0.35}
    dense = {"a": 0.30, "b": 0.25, "c": 0.20}
    one = fuse({"description": dense, "lexical": {"c": 7.2}}, weights)
    assert {name: c.signals["lexical"] for name, c in one.items()} == {"a": -0.35, "b": -0.35, "c": 0.35}
    alike = fuse({"description": dense, "lexical": {"b": 2.0, "c": 2.0}}, weights)
    assert [alike[n].signals["lexical"] for n in "abc"] == [-0.35, 0.35, 0.35]
    stepped = fuse({"description": dense, "lexical": {"c": 3.0, "b": 2.0}}, weights)
    assert [stepped[n].signals["lexical"] for n in "abc"] == [-0.35, -0.35, 0.35]
    same = fuse({"description": {"a": 0.5, "b": 0.5}, "lexical": {"a": 1.0, "b": 1.0}}, weights)
    assert [c.score for c in same.values()] == [0.0, 0.0]
    covering = fuse({"description": dense}, {**weights, "server": 0.4}, covering={"server": {"a": 0.2}})
    assert covering["a"].signals["server"] == 0.0 and covering["b"].signals["server"] == 0.0
    # Past the head (a k past search.candidates): the head's tools score as with the head alone.
    wide = {"description": {**dense, "d": 0.1}, "lexical": {"b": 7.2, "c": 7.2, "d": 7.2, "e": 1.0}}
    head = {"description": dense, "lexical": {"b": 7.2, "c": 7.2, "d": 7.2}}
    past, alone = fuse(wide, weights, stats_of=3), fuse(head, weights)
    assert {n: round(past[n].score, 9) for n in alone} == {n: round(c.score, 9) for n, c in alone.items()}
    assert past["e"].signals["lexical"] == -0.35 and all(math.isfinite(c.score) for c in past.values())


def test_split_intents_finds_sentences_steps_and_then() -> None:
    assert split_intents("what time is it in tokyo") == []
    assert split_intents("Convert 100 USD to EUR and then post the result to Slack") == [
        "Convert 100 USD to EUR", "post the result to Slack"]
    assert len(split_intents("1. find papers 2. summarise them 3. email the summary")) == 3
    assert split_intents("Get the weather. Book a flight; send an email to Bob") == [
        "Get the weather", "Book a flight", "send an email to Bob"]


def test_a_split_requests_vector_is_its_parts_mean_weighted_by_their_words() -> None:
    whole = whole_from_parts(["find papers", "email the summary to Bob"], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    assert whole == pytest.approx([2 / math.sqrt(29), 5 / math.sqrt(29), 0.0])
    assert whole_from_parts(["a b", "c d"], [[0.0, 1.0], [0.0, 1.0]]) == pytest.approx([0.0, 1.0])


def test_max_merge_keeps_each_tools_best_score_and_the_part_that_found_it() -> None:
    whole = {"a": Candidate("a", 1.0), "b": Candidate("b", 0.2)}
    merged = max_merge(whole, [("part two", {"b": Candidate("b", 0.9), "c": Candidate("c", 0.5)})])
    assert {n: c.score for n, c in merged.items()} == {"a": 1.0, "b": 0.9, "c": 0.5}
    assert merged["b"].matched_part == "part two" and merged["a"].matched_part is None


def test_exact_names_rank_first_whatever_their_score() -> None:
    candidates = {"a": Candidate("a", 3.0), "b": Candidate("b", -2.0)}
    # Among exact matches the fused score decides; "z" had no candidate score (0.0) and "b" had -2.0.
    assert [c.name for c in rank(candidates, ["b", "z"], 3)] == ["z", "b", "a"]


def test_boosts_add_to_the_score_and_are_recorded() -> None:
    candidates = {"a": Candidate("a", 1.0), "b": Candidate("b", 0.9)}
    apply_boosts(candidates, {"b": {"caller_habit": 0.2, "reliability": 0.0}, "x": {"popularity": 1.0}})
    assert candidates["b"].score == pytest.approx(1.1)
    assert candidates["b"].boosts == {"caller_habit": 0.2}
    assert [c.name for c in rank(candidates, [], 2)] == ["b", "a"]


def test_max_merge_lowers_a_parts_score_by_the_part_penalty() -> None:
    whole = {"a": Candidate("a", 1.0), "b": Candidate("b", 0.2)}
    parts = [("part", {"a": Candidate("a", 1.3), "b": Candidate("b", 0.9), "c": Candidate("c", 0.4)})]
    merged = max_merge(whole, parts, part_penalty=0.5)
    assert {n: round(c.score, 6) for n, c in merged.items()} == {"a": 1.0, "b": 0.4, "c": -0.1}
    assert merged["a"].matched_part is None and merged["b"].matched_part == "part"
    assert merged["b"].signals == {"part": -0.5}


def test_fuse_keeps_only_the_tools_that_can_still_reach_the_top_k() -> None:
    import random

    rnd = random.Random(7)
    pool = [f"t{i}" for i in range(300)]
    weights = {"name": 0.1, "description": 0.45, "params": 0.1, "lexical": 0.35}
    for _ in range(20):
        scores = {s: {n: rnd.random() for n in rnd.sample(pool, 100)} for s in weights}
        full = fuse(scores, weights)
        kept = fuse(scores, weights, keep=(5, 0.5))
        best = sorted(full.values(), key=lambda c: -c.score)
        threshold = best[4].score - 0.5
        assert set(kept) == {c.name for c in best if c.score >= threshold}
        assert len(kept) < len(full)
        for name, candidate in kept.items():
            assert candidate.score == pytest.approx(full[name].score)
            assert candidate.signals == pytest.approx(full[name].signals)
            assert candidate.raw == full[name].raw
    assert len(fuse(scores, weights, keep=(500, 0.0))) == len(full)  # k beyond the union keeps everything


def test_fuse_scores_are_numpys_z_scores_to_the_last_bit() -> None:
    """The fused score of each tool is the weighted sum of numpy's own z-scores (mean by `ndarray.mean`), the missed
    tools at each signal's floor, bit for bit: fusion's faster arithmetic must not move a score (issue #11's rule:
    the same top 10 and scores)."""
    import random

    import numpy as np

    rnd = random.Random(11)
    pool = [f"t{i}" for i in range(250)]
    weights = {"name": 0.1, "description": 0.45, "params": 0.1, "lexical": 0.35}
    for _ in range(30):
        scores = {s: {n: rnd.gauss(0.3, 0.2) for n in rnd.sample(pool, rnd.randint(2, 100))} for s in weights}
        names = list(dict.fromkeys(n for hits in scores.values() for n in hits))
        expected = dict.fromkeys(names, 0.0)
        for signal, hits in scores.items():
            values = np.array(list(hits.values()))
            centred = values - values.mean()
            z = centred / math.sqrt(float(centred @ centred) / len(values))
            floor = float(z.min())
            column = {n: floor for n in names} | dict(zip(hits, z.tolist(), strict=True))
            for name in names:
                expected[name] += column[name] * weights[signal]
        fused = fuse(scores, weights)
        assert {n: c.score for n, c in fused.items()} == expected  # exact, not approx


def test_fuse_past_the_head_keeps_the_heads_scores_and_puts_the_others_after() -> None:
    """stats_of=n: longer lists (a search of k past search.candidates) z-score by their first n hits, and the tools
    of those first n score as with the first n alone: a larger k keeps a smaller k's order and scores."""
    weights = {"name": 0.3, "description": 0.7}
    wide = {
        "name": {"a": 0.9, "b": 0.8, "c": 0.7, "d": 0.6, "e": 0.5, "f": 0.1},
        "description": {"c": 0.95, "e": 0.9, "a": 0.4, "b": 0.35, "g": 0.3, "d": 0.2},
    }
    head = {signal: dict(list(scores.items())[:3]) for signal, scores in wide.items()}
    covering = {"server": {"a": 0.5, "c": 0.1, "e": 0.9, "g": 0.3}}
    alone = fuse(head, {**weights, "server": 0.4}, covering=covering)
    past = fuse(wide, {**weights, "server": 0.4}, covering=covering, stats_of=3)
    assert set(alone) == {"a", "b", "c", "e"} and set(past) == {"a", "b", "c", "d", "e", "f", "g"}
    assert {name: round(past[name].score, 9) for name in alone} == {n: round(c.score, 9) for n, c in alone.items()}
    assert min(past[name].score for name in alone) > max(past[name].score for name in ("d", "f", "g"))
    assert past["d"].score > past["f"].score  # the others by their own hits
    assert fuse(head, weights, stats_of=3).keys() == fuse(head, weights).keys()  # lists of n or fewer: as before
