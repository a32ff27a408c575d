"""A per-scope query adapter learned from use, offline: does it beat or add to the usage signal, and does it leave
the tools without history alone?

The splits and the replay are `toolscout bench learning --signal usage`'s (service/benchmarks/usage_replay.py): the
same seeded sample (MetaTool 4,000 queries, Seal-Tools all 2,054, seed 0), the same by-query and by-tool splits (its
own functions), and the same log: each history query searched without learning, a successful call of every
relevant tool in its top 10. Offline on bench/pool_variants.py's copy of the search (bench/query_adapter.py's
BASE: centred fields, parts' pool 50, lexical fusion, splitting, verbs) and its cached embeddings.

From that log, per split (one scope each):
  usage     the usage signal as service/usage/signal.py computes it for the agent's own past (every query is the
            agent's; decay none: the log is seconds old), the latest `usage_max_queries` queries a tool, each
            past and present request embedded as the search does (from its parts' vectors at 3 parts or more),
            then cut behind the newcomers (service.search.ranking.behind_newcomers);
  adapter   query_adapter.train on the log's (query, called tool) pairs, the scope's whole catalog in the softmax
            (full W, reg 1e-2: the form that gained most on the same tools), applied to the three field scores;
  guard w   the adapter's change of the fused score, w * (adapted - base), given to the tools with history only;
  guard+cut the same, each tool's rise cut so that it passes no tool without history that led it (as the usage
            signal's newcomer rule; a test query whose relevant tools have no history cannot lose by it).
Each form alone and with the usage signal on top (computed on that form's scores, cut likewise).

Usage: python bench/usage_adapter.py EMBEDDINGS.pkl [SET ...] (a copy of bench/embed_cache.py's cache). ADAPTER_REG and
ADAPTER_SEED vary the adapter's L2 pull towards I and its training seed; ADAPTER_STOP=queries stops it early on
held-out queries rather than held-out tools; ADAPTER_NOISE=p logs, for a share p of the history queries, a
successful call of the first result too when it is not relevant (a noisy log)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from bench import pool_variants as pv
from bench import query_adapter as qa
from bench.embed_cache import EmbeddingCache
from bench.offline import load_set, metrics
from service.benchmarks.usage_replay import AGENT_DEPTH, split_by_query, split_by_tool
from service.settings import LearningSettings, SearchSettings
from service.usage.signal import evidence

SAMPLES = {"metatool": 4000, "sealtools": 4000}  # `bench learning`'s --max-queries default (Seal-Tools has 2,054)
SEED = 0
LEARNING = LearningSettings()
WHOLE_FROM_PARTS = SearchSettings().whole_from_parts
ADAPTER = {
    "rank": 0,
    "reg": float(os.environ.get("ADAPTER_REG", "1e-2")),
    "seed": int(os.environ.get("ADAPTER_SEED", "0")),
}
STOP = os.environ.get(
    "ADAPTER_STOP", "tools"
)  # the early stop's held-out slice: "tools" (query_adapter's) or "queries"
NOISE = float(os.environ.get("ADAPTER_NOISE", "0"))  # share of history queries whose (wrong) first result is called
GUARDS = (0.25, 0.5, 1.0)


def request_vectors(data: pv.Data) -> np.ndarray:
    """Each query's vector as the search reads it for the usage signal (vectors[0]): from its parts' vectors,
    weighted by their words, when it splits into WHOLE_FROM_PARTS parts or more; else the whole text's."""
    out = np.empty((len(data.s.queries), data.q.shape[1]), dtype=np.float32)
    for i, rows in enumerate(data.s.text_rows):
        parts = rows[1:]
        if 0 < WHOLE_FROM_PARTS <= len(parts):
            words = np.array([len(data.s.texts[r].split()) for r in parts], dtype=np.float64)
            out[i] = pv.unit(words @ data.q[parts].astype(np.float64))
        else:
            out[i] = data.q[rows[0]]
    return out


def replay(data: pv.Data, base: np.ndarray, history: list[int]) -> dict[int, list[int]]:
    """Per tool, the history queries that led to a successful call of it (oldest first, the latest kept); with
    ADAPTER_NOISE, some of them a wrong first result's."""
    log: dict[int, list[int]] = {}
    rng = np.random.default_rng(SEED + 1)
    for i in history:
        top = np.argsort(-base[i], kind="stable")[:AGENT_DEPTH]
        called = top[np.isin(top, data.s.relevant[i])]
        if rng.random() < NOISE and top[0] not in called:  # a wrong first result called with success too
            called = np.concatenate([top[:1], called])
        for t in called:
            log.setdefault(int(t), []).append(i)
    return {t: rows[-LEARNING.usage_max_queries :] for t, rows in log.items()}


def newcomer_cut(scores: np.ndarray, rise: np.ndarray, with_history: np.ndarray) -> np.ndarray:
    """`rise` (per tool, a row) cut so that no tool with history passes a candidate without history that led it."""
    finite = np.isfinite(scores)
    ahead = np.sort(scores[finite & ~with_history])
    out = rise.copy()
    for t in np.flatnonzero(finite & with_history & (rise > 0)):
        nearest = np.searchsorted(ahead, scores[t], side="right")
        if nearest < len(ahead):
            out[t] = max(0.0, min(rise[t], ahead[nearest] - scores[t] - 1e-6))
    return out


def with_usage(scores: np.ndarray, vectors: np.ndarray, log: dict[int, list[int]], rows: list[int]) -> np.ndarray:
    """`scores` plus the usage signal of the agent's own past (usage/signal.py), cut behind the newcomers."""
    out = scores.copy()
    tools = np.array(sorted(log))
    with_history = np.zeros(scores.shape[1], dtype=bool)
    with_history[tools] = True
    strength = np.array([evidence(len(log[t]), LEARNING.usage_half_evidence) for t in tools])
    for i in rows:
        candidates = tools[np.isfinite(scores[i, tools])]
        if not len(candidates):
            continue
        nearest = np.array([float((vectors[log[t]] @ vectors[i]).max()) for t in candidates])
        energy = np.exp((nearest - LEARNING.usage_floor) / LEARNING.usage_temperature)
        value = LEARNING.usage_weight * strength[np.searchsorted(tools, candidates)] * energy / (1.0 + energy.sum())
        rise = np.zeros(scores.shape[1])
        rise[candidates] = np.where(value > 1e-4, np.minimum(value, LEARNING.usage_weight), 0.0)
        out[i] += newcomer_cut(scores[i], rise, with_history)
    return out


def guarded(
    base: np.ndarray, adapted: np.ndarray, with_history: np.ndarray, w: float, cut: bool, rows: list[int]
) -> np.ndarray:
    """The adapter's change, weighted by w, for the tools with history only (optionally cut behind newcomers)."""
    both = np.isfinite(base) & np.isfinite(adapted)
    change = np.where(both & with_history[None, :], w * (np.where(both, adapted, 0) - np.where(both, base, 0)), 0.0)
    out = base.copy()
    for i in rows:
        rise = newcomer_cut(base[i], np.maximum(change[i], 0.0), with_history) if cut else np.maximum(change[i], 0.0)
        out[i] = base[i] + rise + np.minimum(change[i], 0.0)
    return out


def train_by_query(
    t: qa.TrainSet, rank: int, reg: float, seed: int, tau: float = 0.05, epochs: int = 12, lr: float = 2e-3
) -> tuple[np.ndarray, dict]:
    """query_adapter.train with its early stop on a held-out 15 % of the history's queries instead of its tools
    (every tool in the softmax): the scope's own tools are what a per-scope adapter is for."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    order = rng.permutation(len(t.q))
    held, fit = order[: max(1, len(order) * 15 // 100)], order[max(1, len(order) * 15 // 100) :]
    docs = {f: torch.from_numpy(d) for f, d in t.docs.items()}
    params = [torch.zeros(384, 384, requires_grad=True)] if rank == 0 else []
    assert params, "the full form only"
    opt = torch.optim.Adam(params, lr=lr)
    best_w, best_epoch, history = torch.eye(384), 0, []
    base = best = qa._recall5(best_w, t, held, "all", False)
    for epoch in range(1, epochs + 1):
        for batch in np.array_split(rng.permutation(fit), max(1, len(fit) // 256)):
            w = qa._matrix(params, rank)
            q = torch.nn.functional.normalize(torch.from_numpy(t.q[batch]) @ w.T, dim=1)
            logp = torch.log_softmax(qa._scores(q, docs, "all") / tau, dim=1)
            target = torch.zeros_like(logp)
            for j, r in enumerate(batch):
                target[j, t.positives[r]] = 1.0 / len(t.positives[r])
            loss = -(target * logp).sum(dim=1).mean() + reg * ((w - torch.eye(384)) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        w = qa._matrix(params, rank).detach()
        r5 = qa._recall5(w, t, held, "all", False)
        history.append(round(r5, 4))
        if r5 > best + 1e-4:
            best, best_epoch, best_w = r5, epoch, w.clone()
    return best_w.numpy(), {"held_base": round(base, 4), "held_best": round(best, 4), "epochs": best_epoch}


def train_adapter(data: pv.Data, log: dict[int, list[int]], key: str) -> tuple[np.ndarray, dict, float, int]:
    """The adapter of one scope from its log: each history query with the tools it led to as positives."""
    called: dict[int, list[int]] = {}
    for t, rows in log.items():
        for i in rows:
            called.setdefault(i, []).append(t)
    queries = sorted(called)
    fields = {f: pv.unit(d - d.mean(axis=0)) for f, d in data.d.items()}
    train_set = qa.TrainSet(
        key, data.q[[data.s.text_rows[i][0] for i in queries]], [np.array(sorted(called[i])) for i in queries], fields
    )
    began = time.perf_counter()
    if STOP == "queries":
        w, seen = train_by_query(train_set, **ADAPTER)
    else:
        w, seen = qa.train([train_set], **ADAPTER)
    return w, seen, time.perf_counter() - began, len(queries)


def summary(data: pv.Data, scores: np.ndarray, rows: list[int]) -> str:
    mask = np.zeros(len(data.s.queries), dtype=bool)
    mask[rows] = True
    m = metrics(data.s, scores, mask)
    return f"{m['recall@1']:.4f} / {m['recall@5']:.4f} / {m['mrr']:.4f}"


def one_split(data: pv.Data, base: np.ndarray, vectors: np.ndarray, split: str) -> None:
    position = {q.qid: i for i, q in enumerate(data.s.queries)}
    history, test = (split_by_query if split == "by query" else split_by_tool)(data.s.queries, SEED)
    h_rows, rows = [position[q.qid] for q in history], [position[q.qid] for q in test]
    log = replay(data, base, h_rows)
    with_history = np.zeros(base.shape[1], dtype=bool)
    with_history[list(log)] = True
    key = f"{data.s.name} {split}"
    w, seen, took, n = train_adapter(data, log, key)
    qa.ADAPTERS[key] = (w, "fields", False)
    adapted = pv.query_scores(data, pv.per_text_scores(data, {**qa.BASE, "adapter": key}))
    forms = {"baseline": base, "adapter": adapted}
    for g in GUARDS:
        forms[f"guard {g}"] = guarded(base, adapted, with_history, g, False, rows)
        forms[f"guard {g}+cut"] = guarded(base, adapted, with_history, g, True, rows)
    head = (
        f"{data.s.name} | {split} | history {len(h_rows)} ({n} with a call, {len(log)} tools) | test "
        f"{len(rows)} | train {took:.1f}s = {1000 * took / max(n, 1):.1f}s per 1,000 | stop "
        f"{seen['held_base']} -> {seen['held_best']} at epoch {seen['epochs']} | |W-I| "
        f"{np.linalg.norm(w - np.eye(384)):.2f}"
    )
    print(head, flush=True)
    for name, scores in forms.items():
        usage = with_usage(scores, vectors, log, rows)
        print(f"  {name:16} | {summary(data, scores, rows)} | + usage {summary(data, usage, rows)}", flush=True)


def query_cost() -> float:
    """ms to map one request vector (a 384 x 384 product and a normalisation), median of 2,000."""
    w, q = np.random.default_rng(0).standard_normal((2, 384, 384)).astype(np.float32)
    times = []
    for i in range(2000):
        began = time.perf_counter()
        pv.unit(q[i % 384] @ w.T)
        times.append(time.perf_counter() - began)
    return 1000 * float(np.median(times))


def main() -> None:
    torch.set_num_threads(int(os.environ.get("ADAPTER_THREADS", "1")))
    cache = EmbeddingCache(Path(sys.argv[1]))
    print("set | split | form | R@1 / R@5 / MRR | with the usage signal", flush=True)
    for name in sys.argv[2:] or list(SAMPLES):
        data = pv.prepare(cache, load_set(name, SAMPLES[name], SEED))
        base = pv.query_scores(data, pv.per_text_scores(data, qa.BASE))
        vectors = request_vectors(data)
        for split in ("by query", "by tool"):
            one_split(data, base, vectors, split)
    print(f"query cost: {query_cost():.3f} ms a request vector", flush=True)


if __name__ == "__main__":
    main()
