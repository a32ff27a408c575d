"""BM25's IDF in the caller's scope (indexer/index/term_counts.py), and the embedded index that weighs its lexical
queries with it: Qdrant's formula, counted over the tools the filter's permissions admit."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from indexer.index.base import SearchFilter, SignalQuery
from indexer.index.edge import EdgeIndex
from indexer.index.term_counts import TermCounts, idf
from indexer.lexical import SparseVector
from tests.indexer.test_index_contract import DIM, point

A, B, C = 101, 202, 303


def test_idf_is_qdrants_formula() -> None:
    assert idf(4, 2) == pytest.approx(math.log(1 + 2.5 / 2.5))
    assert idf(10, 1) == pytest.approx(math.log(1 + 9.5 / 1.5))


def test_counts_follow_the_scope_and_every_change() -> None:
    counts = TermCounts()
    counts.put("s__one", [A, B])
    counts.put("s__two", [A])
    counts.put("h__hidden", [A, B, C])
    assert counts.weights([A, B, C], SearchFilter()) == ([A, B, C], [idf(3, 3), idf(3, 2), idf(3, 1)])
    scope = SearchFilter(allowed=frozenset({"s__one", "s__two", "s__gone"}))
    # C is held by a hidden tool only: it is no term of this scope, and A and B are counted over two tools.
    assert counts.weights([A, B, C], scope) == ([A, B], [idf(2, 2), idf(2, 1)])
    assert counts.weights([A, B], SearchFilter(denied=frozenset({"s__two"}))) == ([A, B], [idf(2, 2), idf(2, 2)])
    counts.put("s__two", [B])  # replaced: its old terms are no longer counted
    assert counts.weights([A, B], scope) == ([A, B], [idf(2, 1), idf(2, 2)])
    counts.remove("s__one")
    assert counts.weights([A, B], scope) == ([B], [idf(1, 1)])
    assert counts.weights([C], SearchFilter(allowed=frozenset())) == ([], [])


def test_the_embedded_index_scores_a_lexical_query_by_the_scopes_idf(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path / "shard", DIM)
    index.upsert(
        [
            point("s__one", lexical={A: 1.0, B: 0.5}),
            point("s__two", lexical={A: 0.5}),
            point("h__hidden", server="h", lexical={B: 1.0}),
        ]
    )
    query = SignalQuery("lexical", 10, sparse=SparseVector([A, B], [1.0, 1.0]))
    everyone = {h.qualified_name: h.score for h in index.search([query], SearchFilter())[0]}
    assert everyone["s__one"] == pytest.approx(idf(3, 2) * 1.0 + idf(3, 2) * 0.5, rel=1e-6)
    scoped = SearchFilter(allowed=frozenset({"s__one", "s__two"}))
    seen = {h.qualified_name: h.score for h in index.search([query], scoped)[0]}
    assert seen == pytest.approx({"s__one": idf(2, 2) * 1.0 + idf(2, 1) * 0.5, "s__two": idf(2, 2) * 0.5}, rel=1e-6)
    index.close()
    # Reopened, the counts are read back from the shard.
    again = EdgeIndex(tmp_path / "shard", DIM)
    assert {h.qualified_name: h.score for h in again.search([query], scoped)[0]} == pytest.approx(seen, rel=1e-6)
    again.close()


def test_a_shard_with_its_own_idf_is_an_older_layout_and_is_rebuilt(tmp_path: Path) -> None:
    index = EdgeIndex(tmp_path / "shard", DIM)
    index.upsert([point("s__one", lexical={A: 1.0})])
    index.close()
    config = tmp_path / "shard" / "edge_config.json"
    layout = json.loads(config.read_text())
    layout["sparse_vectors"]["lexical"]["modifier"] = "idf"
    config.write_text(json.dumps(layout))
    reopened = EdgeIndex(tmp_path / "shard", DIM)  # emptied: the catalog of record refills it at start
    assert reopened.count() == 0
    assert json.loads(config.read_text())["sparse_vectors"]["lexical"]["modifier"] == "none"
    reopened.close()
