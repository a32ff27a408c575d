"""Pure ranking functions: per-signal z-score fusion, merging a split request's parts, exact names.

No I/O here; retrieval.py orchestrates the queries and hands the hits to these functions."""

from __future__ import annotations

import bisect
import math
from collections.abc import Container, Mapping, Sequence
from itertools import chain

import numpy as np

SIGNALS = ("name", "description", "params", "lexical")


class Candidate:
    """A tool under consideration with its fused score and, for explain, every contribution.

    A candidate of `fuse` reads its per-signal values from the fusion's table the first time `signals` or `raw` is
    read: a search fuses about a hundred candidates a text and explains at most the k it returns (building their
    dicts up front was a third of the cost of fusion)."""

    __slots__ = ("name", "score", "boosts", "exact", "exact_tier", "matched_part", "_signals", "_raw", "_table")

    def __init__(
        self,
        name: str,
        score: float = 0.0,
        signals: dict[str, float] | None = None,
        raw: dict[str, float] | None = None,
        table: tuple[_FusionTable, int] | None = None,
    ) -> None:
        self.name = name
        self.score = score
        self.boosts: dict[str, float] = {}
        self.exact = False
        self.exact_tier = 0  # among exact names: 0 spelled as the query, then case, then separators (names.py)
        self.matched_part: str | None = None
        self._signals = {} if signals is None else signals
        self._raw = {} if raw is None else raw
        self._table = table

    @property
    def signals(self) -> dict[str, float]:
        """Weighted z-score per signal, then each bonus added after fusion."""
        self._unpack()
        return self._signals

    @property
    def raw(self) -> dict[str, float]:
        """Raw similarity per signal."""
        self._unpack()
        return self._raw

    def add(self, signal: str, value: float) -> None:
        """Add a bonus to the score, shown under `signal` in explain (without unpacking the fusion's table: max_merge
        and the verb bonuses touch hundreds of candidates a request, and unpacking them all cost 1 ms a long one)."""
        self._signals[signal] = value
        self.score += value

    def _unpack(self) -> None:
        if self._table is not None:
            table, column = self._table
            self._table = None
            self._signals = {**table.weighted(column), **self._signals}
            self._raw = {**table.raw(self.name), **self._raw}

    def __repr__(self) -> str:
        return f"Candidate({self.name!r}, {self.score:.4f}, exact={self.exact})"


class _FusionTable:
    """What one fusion computed, kept for the candidates that are explained."""

    __slots__ = ("signals", "columns", "scores")

    def __init__(self, signals: list[str], columns: np.ndarray, scores: list[Mapping[str, float]]) -> None:
        self.signals, self.columns, self.scores = signals, columns, scores

    def weighted(self, column: int) -> dict[str, float]:
        return dict(zip(self.signals, self.columns[:, column].tolist(), strict=True))

    def raw(self, name: str) -> dict[str, float]:
        return {signal: s[name] for signal, s in zip(self.signals, self.scores, strict=True) if name in s}


def zscores(scores: Mapping[str, float]) -> tuple[dict[str, float], float]:
    """Per-query z-score normalisation of one signal's candidate scores; also the z of a missing candidate."""
    if not scores:
        return {}, 0.0
    z, floor = _zscore_array(np.fromiter(scores.values(), dtype=np.float64, count=len(scores)))
    return dict(zip(scores, z.tolist(), strict=True)), floor


def _zscore_array(values: np.ndarray) -> tuple[np.ndarray, float]:
    """Z-scores and the floor; all 0 when the values are one (no spread), which `fuse` reads as one level."""
    centred = values - values.sum() / len(values)  # what values.mean() gives, without its Python wrapper
    std = math.sqrt(float(centred @ centred) / len(values))  # values.std() costs three times as much
    if std < 1e-9:
        return np.zeros_like(values), 0.0
    z = centred / std
    # A tool outside a signal's candidate list scores no better than the worst candidate it has.
    return z, float(z.min())


def fuse(
    signal_scores: Mapping[str, Mapping[str, float]],
    weights: Mapping[str, float],
    keep: tuple[int, float] | None = None,
    covering: Mapping[str, Mapping[str, float]] | None = None,
    stats_of: int | None = None,
) -> dict[str, Candidate]:
    """Weighted sum of per-signal z-scores over the union of candidates (vectorised: ~400 hits a query).

    `covering` signals score some of those candidates (the server signal: the tools of servers that describe
    themselves): z-scored over the ones they score, adding nothing to the others.
    keep=(k, margin) drops the tools that cannot reach the top k even with `margin` added later (every bonus
    after fusion summed): their fused score is below the k-th best minus the margin. Fewer candidates make every
    later step cheaper, and the top k stays exactly what it would be.
    A signal whose hits all score alike (a BM25 word only one tool has, one hit) has no spread to z-score: its
    hits are one level above the candidates it missed, +1 and -1 (two hits a step apart are +1 and -1 too). They
    were all 0, as if it had found nothing: the one tool a request's rare word names gained nothing from it.
    stats_of=n: signals listing more than n hits (best first: a search of k past search.candidates) are z-scored by
    their first n, and the tools of those first n lists score as they would with those lists alone (a hit past n
    counts as the n-th); the others follow, by their own hits (a covering signal may lift one among them). A larger
    k keeps the order of a smaller one."""
    names = list(dict.fromkeys(chain.from_iterable(signal_scores.values())))
    if not names:
        return {}
    row = {name: i for i, name in enumerate(names)}
    used = [(signal, weights.get(signal, 0.0), scores, False) for signal, scores in signal_scores.items()]
    used += [(signal, weights.get(signal, 0.0), scores, True) for signal, scores in (covering or {}).items()]
    used = [u for u in used if u[1] != 0.0 and (u[2] or not u[3])]  # covering signals that score nobody: none
    columns = np.zeros((len(used), len(names)))
    head = None
    if stats_of is not None and any(len(scores) > stats_of for scores in signal_scores.values()):
        head = set(chain.from_iterable(list(scores)[:stats_of] for scores in signal_scores.values()))
    for c, (_signal, weight, scores, partial) in enumerate(used):
        scores = {name: v for name, v in scores.items() if name in row} if partial else scores
        if scores and head is not None:
            _past_head(columns[c], [row[name] for name in scores], scores, head, stats_of, partial, names)  # type: ignore[arg-type]
        elif scores:
            z, floor = _zscore_array(np.fromiter(scores.values(), dtype=np.float64, count=len(scores)))
            if not partial and len(scores) < len(names) and floor == 0.0:  # one level: above the tools it missed
                z, floor = np.ones_like(z), -1.0
            columns[c].fill(0.0 if partial else floor)
            columns[c, np.fromiter(map(row.__getitem__, scores), np.intp, len(scores))] = z
        columns[c] *= weight
    totals = columns.sum(axis=0)
    rows = np.arange(len(names))
    if keep is not None and len(names) > keep[0]:
        threshold = np.partition(totals, len(names) - keep[0])[len(names) - keep[0]] - keep[1]
        rows = np.flatnonzero(totals >= threshold)
    table = _FusionTable([signal for signal, _, _, _ in used], columns, [scores for _, _, scores, _ in used])
    return {
        names[i]: Candidate(names[i], score, None, None, (table, i))  # positional: a keyword costs a dict a call
        for i, score in zip(rows.tolist(), totals[rows].tolist(), strict=True)
    }


def _past_head(
    column: np.ndarray,
    rows: list[int],
    scores: Mapping[str, float],
    head: set[str],
    stats_of: int,
    partial: bool,
    names: list[str],
) -> None:
    """`fuse`'s column of one signal whose z-scores come from the head's hits (its first `stats_of`; for a covering
    signal, the head's tools): a tool of the head scores as with the head alone, no lower than the head's floor."""
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    reference = values[[name in head for name in scores]] if partial else values[:stats_of]
    if not len(reference):
        return
    centred = reference - reference.mean()
    std = math.sqrt(float(centred @ centred) / len(reference))
    if std < 1e-9:
        if partial or head <= set(list(scores)[:stats_of]):
            return  # the head's z-scores are all 0 (as `_zscore_array` gives), and so is the rest's
        column.fill(-1.0)  # one level above the head's tools it missed, as `fuse` scores it (below)
        column[rows] = np.where(values >= reference[0], 1.0, -1.0)
        return
    z = (values - reference.mean()) / std
    if partial:
        column[rows] = z
        return
    floor = float(z[:stats_of].min())
    column.fill(float(z.min()))
    column[rows] = z
    in_head = np.fromiter((name in head for name in names), dtype=bool, count=len(names))
    column[in_head] = np.maximum(column[in_head], floor)


def from_fused(scores: Mapping[str, float]) -> dict[str, Candidate]:
    """Candidates of a list the index fused itself (Qdrant server: prefetch + fusion), z-normalised so that
    their scale, and so the weight of the usage boosts, matches the weighted z-score sums of `fuse`."""
    normalised, _ = zscores(scores)
    return {
        name: Candidate(name, score=z, signals={"fused": z}, raw={"fused": scores[name]})
        for name, z in normalised.items()
    }


def max_merge(
    whole: dict[str, Candidate], parts: Sequence[tuple[str, dict[str, Candidate]]], part_penalty: float = 0.0
) -> dict[str, Candidate]:
    """Each tool keeps its best score over the whole request and each of its parts, a part's score lowered by
    `part_penalty` (a part is less of the request than the whole: "Can you suggest any good ones?")."""
    merged = dict(whole)
    for part, candidates in parts:
        for name, candidate in candidates.items():
            current = merged.get(name)
            if current is None or candidate.score - part_penalty > current.score:
                if part_penalty:
                    candidate.add("part", -part_penalty)
                candidate.matched_part = part
                merged[name] = candidate
    return merged


def apply_boosts(candidates: dict[str, Candidate], boosts: Mapping[str, Mapping[str, float]]) -> None:
    """Add bounded usage boosts (learning.py computes and bounds them)."""
    for name, named_boosts in boosts.items():
        candidate = candidates.get(name)
        if candidate is None:
            continue
        for kind, value in named_boosts.items():
            if value:
                candidate.boosts[kind] = value
                candidate.score += value


def apply_name_verbs(
    candidates: dict[str, Candidate], verbs: Mapping[str, str], query_words: frozenset[str], weight: float
) -> None:
    """Add `weight` to each candidate whose name leads with a verb the request uses (`commit` in git_commit)."""
    if weight == 0.0:
        return
    for name, candidate in candidates.items():
        if verbs.get(name) in query_words:
            candidate.add("name_verb", weight)


LEAD_VERB_HEAD = 3


def apply_lead_verb(
    candidates: dict[str, Candidate],
    verbs: Mapping[str, str],
    wanted: frozenset[str],
    weight: float,
    signal: str = "lead_verb",
) -> None:
    """Add `weight` to each of the best LEAD_VERB_HEAD candidates whose name verb is one the request asks for (the
    verb it leads with; for a question, the verbs that read): it decides between the near-tied siblings at the head
    ("commit my staged changes": git_commit over git_diff_staged), and does not lift a tool from far below because
    its name starts with a common verb (`find_agency` for every "find me ..."; head 3 against the whole list:
    MetaTool R@1 .6069 -> .6079)."""
    if weight == 0.0 or not wanted or not candidates:
        return
    head = sorted(candidates.values(), key=lambda c: -c.score)[:LEAD_VERB_HEAD]
    for candidate in head:
        if verbs.get(candidate.name) in wanted:
            candidate.add(signal, weight)


def add_signal(candidates: dict[str, Candidate], signal: str, values: Mapping[str, float]) -> None:
    """Add a signal's value to the candidates it names (the others are left as they are)."""
    for name, value in values.items():
        candidate = candidates.get(name)
        if candidate is not None:
            candidate.add(signal, value)


def behind_newcomers(
    candidates: Mapping[str, Candidate], values: Mapping[str, float], with_history: Container[str]
) -> dict[str, float]:
    """The learned changes (the usage values, the query adapter's) with their rises cut so that no tool passes a
    candidate without history (a tool `with_history` does not hold) that led it: evidence reorders the tools people
    used, and never buries one nobody could use yet under a sibling asked for in nearly the same words; a fall is
    kept as it is (only tools with history fall). `toolscout bench learning --signal usage`, MetaTool: by query
    +.057 -> +.055 R@1, by tool (the relevant tools without history) -.008 -> .000."""
    if not values:
        return {}
    ahead = sorted(c.score for name, c in candidates.items() if name not in with_history)
    out: dict[str, float] = {}
    for name, value in values.items():
        candidate = candidates.get(name)
        if candidate is None:
            continue
        nearest = bisect.bisect_right(ahead, candidate.score)  # the lowest newcomer scoring above it
        if value > 0 and nearest < len(ahead):
            value = max(0.0, min(value, ahead[nearest] - candidate.score - 1e-6))
        out[name] = value
    return out


def rank(candidates: dict[str, Candidate], exact: Sequence[str] | Mapping[str, int], k: int) -> list[Candidate]:
    """Exact-name matches first (the one spelled as the query first, then by fused score), then by score; top k.

    `exact` maps each exact match to its spelling tier (indexer.names.spelling_tier); a plain list is tier 0."""
    tiers = exact if isinstance(exact, Mapping) else dict.fromkeys(exact, 0)
    for name, tier in tiers.items():
        candidate = candidates.setdefault(name, Candidate(name))
        candidate.exact, candidate.exact_tier = True, tier
    ordered = sorted(candidates.values(), key=lambda c: (not c.exact, c.exact_tier, -c.score, c.name))
    return ordered[:k]
