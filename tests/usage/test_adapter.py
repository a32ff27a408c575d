"""The per-scope query adapter (service/usage/adapter.py, adapter_training.py): its gradient, what it trains on (a
caller's own queries in one scope), and what it may move (tools with history, within its bound, behind the
newcomers)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from service.search.ranking import Candidate, behind_newcomers, rank
from service.settings import LearningSettings
from service.usage.adapter import (
    ScopeMaps,
    TrainingSet,
    adapter_values,
    loss_and_gradient,
    train_map,
)
from service.usage.adapter_training import due_maps, examples_for
from service.usage.signal import UsageVectors

SETTINGS = LearningSettings()
NOW = datetime.now(UTC)
WEIGHTS = {"name": 0.1, "description": 0.45, "params": 0.1}


def _unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=-1, keepdims=True)  # type: ignore[no-any-return]


def test_the_gradient_is_the_losss() -> None:
    rng = np.random.default_rng(0)
    queries, docs = _unit(rng.standard_normal((6, 8))), _unit(rng.standard_normal((5, 8)))
    positives = [np.array([i % 5]) for i in range(5)] + [np.array([1, 3])]
    a = 0.1 * rng.standard_normal((8, 8))
    _, grad = loss_and_gradient(a, queries, positives, docs)
    numeric = np.zeros_like(a)
    for i in range(8):
        for j in range(8):
            step = np.zeros_like(a)
            step[i, j] = 1e-6
            numeric[i, j] = (
                loss_and_gradient(a + step, queries, positives, docs)[0]
                - loss_and_gradient(a - step, queries, positives, docs)[0]
            ) / 2e-6
    assert np.allclose(grad, numeric, atol=1e-5), np.abs(grad - numeric).max()


def test_a_map_learns_what_the_catalog_alone_ranks_wrong() -> None:
    """Queries of tool k lie nearer tool k+1's vector: the map learns to send them to tool k (held-out queries too)."""
    rng = np.random.default_rng(1)
    docs = _unit(rng.standard_normal((40, 32))).astype(np.float32)
    tools = rng.integers(0, 40, 400)
    queries = _unit(docs[(tools + 1) % 40] + 0.6 * docs[tools] + 0.2 * rng.standard_normal((400, 32)))
    data = TrainingSet(queries.astype(np.float32), [np.array([t]) for t in tools], docs)
    trained = train_map(data, seconds=30.0)
    assert trained.matrix is not None and trained.held_best > trained.held_base + 0.05


def _state(rows: list[tuple[str, str, str]], scope: str = "dev") -> UsageVectors:
    """Evidence (caller, query, tool), oldest first, each query's vector a fixed random unit vector."""
    state = UsageVectors()
    for i, (caller, query, tool) in enumerate(rows):
        state.add(scope, tool, caller, query, NOW + timedelta(seconds=i), SETTINGS.usage_max_queries)
    for usage in state.tools.values():
        seeds = [sum(map(ord, q)) for q, _, _ in usage.queries]
        usage.vectors = np.stack([_unit(np.random.default_rng(s).standard_normal(8)) for s in seeds])
        usage.weigh(np.ones(len(usage.queries)), SETTINGS)
    return state


def test_a_callers_map_trains_on_its_own_queries_only_and_floods_count_once_a_text() -> None:
    flood = [("mallory", f"wipe my disk {i}", f"files__weather_{i % 3}") for i in range(60)]
    honest = [("bob", f"erase folder {i}", "files__erase") for i in range(34)]
    honest += [("bob", "erase folder 33", "files__list")] * 5  # one text, two tools: one example with both
    scoped = _state(flood + honest).by_scope["dev"]
    for_bob = examples_for(scoped, "bob", 2000)
    assert len(for_bob) == 32 and {t for e in for_bob for t in e.tools} == {"files__erase", "files__list"}
    assert [e.tools for e in for_bob if e.tools != {"files__erase"}] == [{"files__erase", "files__list"}]
    assert {t for e in examples_for(scoped, "mallory", 2000) for t in e.tools} == {
        f"files__weather_{i}" for i in range(3)
    }
    assert len(examples_for(scoped, "mallory", 2000)) == 60  # the 60 it kept (20 a tool)
    assert len(examples_for(scoped, "mallory", 5)) == 5  # the latest only
    assert examples_for(scoped, "alice", 2000) == []
    # Both have adapter_min_queries distinct queries of their own: a map each, and none for anyone else.
    assert set(due_maps(scoped, ScopeMaps(), 100, SETTINGS)) == {"mallory", "bob"}
    few = _state(flood[:31] + honest[:31]).by_scope["dev"]
    assert due_maps(few, ScopeMaps(), 62, SETTINGS) == {}
    # Retrained once the scope's evidence grew by adapter_retrain_growth.
    maps = ScopeMaps(trained_at={"mallory": 100, "bob": 100})
    assert due_maps(scoped, maps, 110, SETTINGS) == {} and set(due_maps(scoped, maps, 120, SETTINGS)) == {
        "mallory",
        "bob",
    }


def _maps(names: list[str], fields: np.ndarray, matrix: np.ndarray) -> ScopeMaps:
    return ScopeMaps(names={n: i for i, n in enumerate(names)}, fields=fields, own={"bob": matrix})


def test_only_tools_with_history_move_within_the_bound_and_the_caller_reads_its_own_map() -> None:
    rng = np.random.default_rng(2)
    fields = _unit(rng.standard_normal((2, 3, 8))).astype(np.float32)
    matrix = np.eye(8, dtype=np.float32) + rng.standard_normal((8, 8)).astype(np.float32)
    maps = _maps(["a", "b"], fields, matrix)
    spreads = {"name": 0.01, "description": 0.01, "params": 0.01}  # a tiny spread: large changes, clipped
    values = adapter_values(maps, "bob", rng.standard_normal(8), ["a", "b", "new"], spreads, WEIGHTS, 1.0)
    assert set(values) <= {"a", "b"} and values and all(abs(v) <= 1.0 for v in values.values())
    assert max(abs(v) for v in values.values()) == 1.0
    assert adapter_values(maps, "alice", rng.standard_normal(8), ["a", "b"], spreads, WEIGHTS, 1.0) == {}  # no map
    identity = _maps(["a", "b"], fields, np.eye(8, dtype=np.float32))
    assert adapter_values(identity, "bob", rng.standard_normal(8), ["a", "b"], spreads, WEIGHTS, 1.0) == {}


def test_a_newcomer_with_the_best_text_match_stays_first() -> None:
    candidates = {"new": Candidate("new", 2.0), "old": Candidate("old", 1.5), "low": Candidate("low", 0.4)}
    changes = behind_newcomers(candidates, {"old": 1.0, "low": -0.3, "gone": 0.5}, {"old", "low"})
    assert changes == {"old": pytest.approx(0.5 - 1e-6), "low": -0.3}
    for name, value in changes.items():
        candidates[name].add("adapter", value)
    assert [c.name for c in rank(candidates, [], 3)] == ["new", "old", "low"]
