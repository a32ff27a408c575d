"""A per-scope query map learned from use (issue 12): q -> unit((I + A) q), trained on a permission scope's own usage
evidence (the queries that led to a successful call, each with the tools it led to) and applied to the tools with
history only.

Training (numpy, Adam, one BLAS thread: service/resources.py limits it): a softmax over the scope's catalog (the
tools its roles may use, nothing else) of the mapped query's weighted field cosines (the search's own weights and
centred field vectors, indexer/index/pool_matrix.PoolMatrix.centred_fields), temperature ADAPTER_TEMPERATURE, each
tool the query led to a positive; an L2 pull of A towards 0; early stop on a held-out 15 % of the queries (the map
kept is the best epoch's, none when no epoch beat the identity). `bench/usage_adapter.py` measured the form offline
(torch; docs/quality-history.md, "A per-scope adapter learned from use").

At search time each candidate with history in the map gets the change of its fused score the map makes, to first
order: sum over the fields of weight * (cos(mapped query, field) - cos(query, field)) / the field's z-score spread
among the search's candidates, clipped to +-learning.adapter_weight; retrieval cuts the rises behind the newcomers
(service.search.ranking.behind_newcomers), as the usage signal's."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from indexer.index.base import DENSE_FIELDS

ADAPTER_TEMPERATURE = 0.05
ADAPTER_REG = 1e-2  # the L2 pull towards the identity (bench/usage_adapter.py's, the form that gained most)
ADAPTER_LR = 2e-3
ADAPTER_EPOCHS = 12
ADAPTER_BATCH = 256
HELD_SHARE = 0.15
STOP_DEPTH = 5


@dataclass
class TrainingSet:
    """One map's examples: unit query vectors, the rows of `docs` each led to, and the catalog's mixed fields."""

    queries: np.ndarray  # (examples, dimension) unit
    positives: list[np.ndarray]  # per example, rows of docs
    docs: np.ndarray  # (tools, dimension): sum over fields of weight / total * centred unit field vector


@dataclass
class Trained:
    """What a training gave: the map (None: no epoch beat the identity) and what its early stop saw."""

    matrix: np.ndarray | None
    examples: int
    seconds: float
    held_base: float
    held_best: float
    epochs: int


def mixed_fields(fields: np.ndarray, weights: Mapping[str, float]) -> np.ndarray:
    """(tools, fields, dimension) -> (tools, dimension): the fields weighted as the search weighs their scores."""
    w = np.array([weights.get(f, 0.0) for f in DENSE_FIELDS], dtype=np.float32)
    total = float(w.sum()) or 1.0
    return np.einsum("tfd,f->td", fields, w / total)  # type: ignore[no-any-return]


def held_recall(matrix: np.ndarray, data: TrainingSet, rows: np.ndarray) -> float:
    """The early stop's measure: recall at STOP_DEPTH of the held-out queries' positives (at 1 tool in 20 of a
    catalog of fewer than 100 tools: in a small catalog the top 5 holds the right tool from the start)."""
    depth = max(1, min(STOP_DEPTH, len(data.docs) // 20))
    mapped = _unit_rows(data.queries[rows] @ matrix.T)
    scores = mapped @ data.docs.T
    top = np.argpartition(-scores, depth - 1, axis=1)[:, :depth]
    return float(np.mean([np.isin(data.positives[r], top[i]).mean() for i, r in enumerate(rows)]))


def _unit_rows(rows: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    return rows / np.where(norms > 0, norms, 1.0)  # type: ignore[no-any-return]


def loss_and_gradient(
    a: np.ndarray, queries: np.ndarray, positives: Sequence[np.ndarray], docs: np.ndarray
) -> tuple[float, np.ndarray]:
    """The batch's mean cross-entropy of its positives under the softmax of unit((I + a) q) . docs / temperature,
    plus the L2 pull, and its gradient with respect to `a`."""
    u = queries + queries @ a.T
    norms = np.linalg.norm(u, axis=1, keepdims=True)
    mapped = u / norms
    logits = mapped @ docs.T / ADAPTER_TEMPERATURE
    logits -= logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    total = p.sum(axis=1, keepdims=True)
    p /= total
    loss = 0.0
    for j, rows in enumerate(positives):
        loss -= float(np.mean(logits[j, rows] - np.log(total[j, 0])))
        p[j, rows] -= 1.0 / len(rows)
    grad_mapped = (p / (ADAPTER_TEMPERATURE * len(queries))) @ docs
    grad_u = (grad_mapped - mapped * (grad_mapped * mapped).sum(axis=1, keepdims=True)) / norms
    loss = loss / len(queries) + ADAPTER_REG * float((a * a).sum())
    return loss, grad_u.T @ queries + 2.0 * ADAPTER_REG * a


def train_map(data: TrainingSet, seconds: float, seed: int = 0) -> Trained:
    """The map of the epoch whose held-out recall (`held_recall`) was best, within `seconds` (the best so far when
    time runs out)."""
    began = time.perf_counter()
    dimension = data.queries.shape[1]
    eye = np.eye(dimension, dtype=np.float32)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.queries))
    cut = max(1, len(order) * int(100 * HELD_SHARE) // 100)
    held, fit = order[:cut], order[cut:]
    a = np.zeros((dimension, dimension), dtype=np.float32)
    m, v = np.zeros_like(a), np.zeros_like(a)
    step, best, best_a, best_epoch = 0, held_recall(eye, data, held), None, 0
    base = best
    for epoch in range(1, ADAPTER_EPOCHS + 1):
        for batch in np.array_split(rng.permutation(fit), max(1, len(fit) // ADAPTER_BATCH)):
            _, grad = loss_and_gradient(a, data.queries[batch], [data.positives[i] for i in batch], data.docs)
            step += 1
            m = 0.9 * m + 0.1 * grad
            v = 0.999 * v + 0.001 * grad * grad
            a -= ADAPTER_LR * (m / (1 - 0.9**step)) / (np.sqrt(v / (1 - 0.999**step)) + 1e-8)
            if time.perf_counter() - began > seconds:
                break
        r5 = held_recall(eye + a, data, held)
        if r5 > best + 1e-4:
            best, best_a, best_epoch = r5, a.copy(), epoch
        if time.perf_counter() - began > seconds:
            break
    matrix = None if best_a is None else eye + best_a
    took = time.perf_counter() - began
    return Trained(matrix, len(data.queries), took, round(base, 4), round(best, 4), best_epoch)


@dataclass
class ScopeMaps:
    """A scope's maps, one per caller with enough evidence of its own, and the centred field vectors of the tools with
    history they apply to."""

    names: dict[str, int] = field(default_factory=dict)  # tool with history -> its row of `fields`
    fields: np.ndarray | None = None  # (tools with history, fields, dimension)
    own: dict[str, np.ndarray] = field(default_factory=dict)
    trained_at: dict[str, int] = field(default_factory=dict)  # map key -> the scope's evidence count it saw
    report: dict[str, Trained] = field(default_factory=dict)

    def matrix_for(self, caller: str | None) -> np.ndarray | None:
        """The map this caller reads: its own (none for a caller without one)."""
        return self.own.get(caller) if caller is not None else None

    def nbytes(self) -> int:
        """Memory held (maps and field vectors)."""
        return sum(m.nbytes for m in self.own.values()) + (self.fields.nbytes if self.fields is not None else 0)


def field_spreads(hit_lists: Sequence[Sequence[Any]]) -> dict[str, float]:
    """The standard deviation of each field's scores among the first text's candidates (what fusion z-scores them
    by): the hits are in SIGNALS order, the dense fields first."""
    pairs = zip(DENSE_FIELDS, hit_lists, strict=False)
    return {f: float(np.std([h.score for h in hits])) if hits else 0.0 for f, hits in pairs}


def adapter_values(
    maps: ScopeMaps,
    caller: str | None,
    vector: Sequence[float],
    names: Iterable[str],
    spreads: Mapping[str, float],
    weights: Mapping[str, float],
    bound: float,
) -> dict[str, float]:
    """The change of each named tool's fused score that the caller's map makes (tools with history in the map only),
    each within +-bound; `spreads` are the z-score spreads (standard deviations) of the search's field scores."""
    matrix = maps.matrix_for(caller)
    if matrix is None or maps.fields is None or bound <= 0.0:
        return {}
    known = [(n, row) for n in names if (row := maps.names.get(n)) is not None]
    scale = np.array(
        [weights.get(f, 0.0) / spreads[f] if spreads.get(f, 0.0) > 1e-9 else 0.0 for f in DENSE_FIELDS],
        dtype=np.float32,
    )
    if not known or not scale.any():
        return {}
    query = np.asarray(vector, dtype=np.float32)
    query = query / (float(np.linalg.norm(query)) or 1.0)
    mapped = matrix @ query
    mapped /= float(np.linalg.norm(mapped)) or 1.0
    rows = np.fromiter((row for _, row in known), dtype=np.int64, count=len(known))
    change = (maps.fields[rows] @ (mapped - query)) @ scale  # (tools,)
    change = np.clip(change, -bound, bound)
    return {name: round(float(c), 6) for (name, _), c in zip(known, change, strict=True) if abs(c) > 1e-4}


def adapter_changes(
    maps: ScopeMaps,
    caller: str | None,
    candidates: Mapping[str, Any],
    texts: Sequence[str],
    vectors: Sequence[Sequence[float]],
    hit_lists: Sequence[Sequence[Any]],
    weights: Mapping[str, float],
    bound: float,
) -> dict[str, float]:
    """`adapter_values` of each candidate for the text its score came from (the whole request, or the part it
    matched best: service.search.ranking.max_merge), with that text's vector and field spreads; the hits are per
    text in SIGNALS order."""
    if maps.matrix_for(caller) is None or not texts:
        return {}
    row = {text: i for i, text in enumerate(texts)}
    by_text: dict[int, list[str]] = {}
    for name, candidate in candidates.items():
        if name in maps.names:
            by_text.setdefault(row.get(candidate.matched_part, 0), []).append(name)
    width = len(hit_lists) // len(texts)
    out: dict[str, float] = {}
    for i, names in by_text.items():
        spreads = field_spreads(hit_lists[i * width : (i + 1) * width])
        out.update(adapter_values(maps, caller, vectors[i], names, spreads, weights, bound))
    return out
