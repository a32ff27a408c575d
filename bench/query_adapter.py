"""Issue #12: a learned linear adapter on MiniLM's embedding space, trained contrastively on (request, relevant
tool) pairs of one dev set and measured with the service's whole search (bench/pool_variants.py: centred fields,
parts' pool 50, lexical fusion, splitting, verbs) on the other set.

The adapter maps a text vector q to q' = normalize(W q), W = I + U V^T (rank r), I + A (full, 384 x 384; rank 0)
or I + diag(a) (rank -1), with an L2 pull of W towards I. Loss: softmax over the training catalog's tools of the
(centred) field cosines divided by a temperature, each relevant tool a positive (the mean of their -log p).
`loss_fields` "desc" scores the description field alone, "all" the service's weighted name / description / params
mix. `sym` maps the documents' field vectors by the same W too. Early stop on a held-out slice of the training set:
the queries of 15 % of its tools (those tools out of the softmax), so the stop measures tools the adapter never
saw; the adapter kept is the one of the best epoch (W = I when no epoch beat it).

Applied (`where`): "desc" the description score only; "fields" the three field scores; "all" the fields and the
`tool` vector scan. A split request's parts are mapped as its whole text.

Not kept (docs/quality-history.md, "A learned query adapter"): no form gained the other set in both directions.

Usage: python bench/query_adapter.py EMBEDDINGS.pkl [GROUP ...] (bench/embed_cache.py's cache; groups: GROUPS)"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from bench import pool_variants as pv
from bench.embed_cache import EmbeddingCache
from bench.offline import load_set
from indexer.documents import build_document

BASE = {"centre": 1.0, "part_pool": 50}
FIELD_WEIGHTS = {"name": 0.10, "description": 0.45, "params": 0.10}
ADAPTERS: dict[str, tuple[np.ndarray, str, bool]] = {}  # key -> (W, where, sym): what a configuration names
_ORIGINAL_FIELD_SCORES = pv.field_scores


@dataclass
class TrainSet:
    name: str
    q: np.ndarray  # whole queries x 384 (unit)
    positives: list[np.ndarray]  # per query: tool rows
    docs: dict[str, np.ndarray]  # field -> tools x 384, centred by the catalog's mean and unit


def training_set(cache: EmbeddingCache, name: str, skip_qids: set[str] | None = None) -> TrainSet:
    s = load_set(name, None, 0)
    keep = [i for i, q in enumerate(s.queries) if not skip_qids or q.qid not in skip_qids]
    q = cache.embed([s.queries[i].text for i in keep]).astype(np.float32)
    docs = [build_document(t) for t in s.tools]
    fields = {}
    for f in pv.FIELDS:
        d = cache.embed([getattr(doc, f) for doc in docs]).astype(np.float32)
        fields[f] = pv.unit(d - d.mean(axis=0))
    return TrainSet(name, q, [s.relevant[i] for i in keep], fields)


def _scores(q: torch.Tensor, docs: dict[str, torch.Tensor], loss_fields: str) -> torch.Tensor:
    if loss_fields == "desc":
        return q @ docs["description"].T
    total = sum(FIELD_WEIGHTS.values())
    return sum((w / total) * (q @ docs[f].T) for f, w in FIELD_WEIGHTS.items())  # type: ignore[return-value]


def _matrix(params: list[torch.Tensor], rank: int) -> torch.Tensor:
    eye = torch.eye(384)
    if rank < 0:  # a diagonal: each dimension reweighted
        return eye + torch.diag(params[0])
    return eye + (params[0] @ params[1].T if rank else params[0])


def _recall5(w: torch.Tensor, t: TrainSet, rows: np.ndarray, loss_fields: str, sym: bool) -> float:
    with torch.no_grad():
        q = torch.nn.functional.normalize(torch.from_numpy(t.q[rows]) @ w.T, dim=1)
        docs = {f: torch.from_numpy(d) for f, d in t.docs.items()}
        if sym:
            docs = {f: torch.nn.functional.normalize(d @ w.T, dim=1) for f, d in docs.items()}
        top = torch.topk(_scores(q, docs, loss_fields), 5, dim=1).indices.numpy()
    return float(np.mean([np.isin(t.positives[r], top[i]).mean() for i, r in enumerate(rows)]))


def train(sets: list[TrainSet], rank: int, reg: float, tau: float = 0.05, loss_fields: str = "all",
          sym: bool = False, epochs: int = 12, lr: float = 2e-3, seed: int = 0,
          held_share: float = 0.15) -> tuple[np.ndarray, dict]:
    """The adapter's W (384 x 384) at the epoch whose held-out R@5 (mean over the sets) was best, and what the
    early stop saw. Batches of 256 queries, each of one set, its softmax over that set's tools not held out."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    plans = []
    for t in sets:
        n_tools = len(t.docs["description"])
        held = np.zeros(n_tools, dtype=bool)
        held[rng.choice(n_tools, int(held_share * n_tools), replace=False)] = True
        touches = np.array([held[p].any() for p in t.positives])
        docs = {f: torch.from_numpy(d[~held]) for f, d in t.docs.items()}
        plans.append((t, np.flatnonzero(touches), np.flatnonzero(~touches), np.cumsum(~held) - 1, docs))

    def held_recall(w: torch.Tensor) -> float:
        return float(np.mean([_recall5(w, t, val, loss_fields, sym) for t, val, *_ in plans]))

    if rank < 0:
        params = [torch.zeros(384, requires_grad=True)]
    elif rank:
        params = [torch.zeros(384, rank, requires_grad=True), (0.01 * torch.randn(384, rank)).requires_grad_()]
    else:
        params = [torch.zeros(384, 384, requires_grad=True)]
    opt = torch.optim.Adam(params, lr=lr)
    best_w, best_epoch, history = torch.eye(384), 0, []
    base = best = held_recall(best_w)
    for epoch in range(1, epochs + 1):
        batches = [(k, b) for k, (_, _, fit, _, _) in enumerate(plans)
                   for b in np.array_split(rng.permutation(fit), max(1, len(fit) // 256))]
        for i in rng.permutation(len(batches)):
            k, batch = batches[i]
            t, _, _, col, docs = plans[k]
            w = _matrix(params, rank)
            q = torch.nn.functional.normalize(torch.from_numpy(t.q[batch]) @ w.T, dim=1)
            dd = {f: torch.nn.functional.normalize(d @ w.T, dim=1) for f, d in docs.items()} if sym else docs
            logp = torch.log_softmax(_scores(q, dd, loss_fields) / tau, dim=1)
            target = torch.zeros_like(logp)
            for j, r in enumerate(batch):
                target[j, col[t.positives[r]]] = 1.0 / len(t.positives[r])
            loss = -(target * logp).sum(dim=1).mean() + reg * ((w - torch.eye(384)) ** 2).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        w = _matrix(params, rank).detach()
        r5 = held_recall(w)
        history.append(round(r5, 4))
        if r5 > best + 1e-4:
            best, best_epoch, best_w = r5, epoch, w.clone()
    seen = {"held_base": round(base, 4), "held_best": round(best, 4), "epochs": best_epoch, "history": history}
    return best_w.numpy(), seen


def adapted_field_scores(data: pv.Data, p: dict) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """pool_variants.field_scores with the adapter named by p["adapter"] applied (centring at p["centre"])."""
    if not p.get("adapter"):
        return _ORIGINAL_FIELD_SCORES(data, p)
    w, where, sym = ADAPTERS[p["adapter"]]
    qa = pv.unit(data.q @ w.T)
    mapped = ("description",) if where == "desc" else pv.FIELDS
    alpha = p.get("centre", 0.0)
    scores = {}
    for f in pv.FIELDS:
        d = data.d[f]
        d = pv.unit(d - alpha * d.mean(axis=0)) if alpha else d
        if f in mapped:
            scores[f] = qa @ (pv.unit(d @ w.T) if sym else d).T
        else:
            scores[f] = data.q @ d.T
    tool = pv.unit(data.d["name"] + data.d["description"] + data.d["params"])
    scan = (qa if where == "all" and not sym else data.q) @ tool.T
    return scores, scan


pv.field_scores = adapted_field_scores


def evaluate(data: pv.Data, key: str, w: np.ndarray, where: str, sym: bool) -> dict[str, float]:
    ADAPTERS[key] = (w, where, sym)
    return pv.run(data, {**BASE, "adapter": key})


FORMS: dict[str, list[dict]] = {  # train() keyword arguments, each with where (applied) in it
    "lowrank": [{"rank": r, "reg": reg, "where": wh} for r in (16, 64) for reg in (1e-3, 1e-2)
                for wh in ("fields",)],
    "full": [{"rank": 0, "reg": reg, "where": "fields"} for reg in (1e-3, 1e-2, 1e-1)],
    "where": [{"rank": 64, "reg": 1e-3, "where": wh} for wh in ("desc", "all")],
    "desc_loss": [{"rank": 64, "reg": 1e-3, "loss_fields": "desc", "where": "desc"}],
    "sym": [{"rank": 64, "reg": 1e-3, "sym": True, "where": "fields"}],
    "tau": [{"rank": 64, "reg": 1e-3, "tau": tau, "where": "fields"} for tau in (0.02, 0.1)],
    "slow": [{"rank": r, "reg": 1e-2, "lr": 2e-4, "where": "fields"} for r in (0, 64)]
    + [{"rank": 0, "reg": 0.1, "lr": 5e-4, "where": "all"}],
    "seeds": [{"rank": 0, "reg": reg, "seed": seed, "where": "fields"} for reg in (1e-3, 1e-2) for seed in (1, 2)],
    "diag": [{"rank": -1, "reg": reg, "lr": 1e-2, "where": "fields"} for reg in (1e-3, 1e-2)]
    + [{"rank": -1, "reg": 1e-3, "lr": 1e-2, "where": "all"}],
    "insample": [{"rank": 0, "reg": 1e-2, "where": "fields"}, {"rank": 0, "reg": 0.1, "where": "all"}],
}


PAIRS = "metatool:sealtools,sealtools:metatool,metatool-rest:metatool,both:metatool+sealtools"


def main() -> None:
    """ADAPTER_PAIRS (default PAIRS): training set -> measured sets; `metatool-rest` is MetaTool without the
    3,000 sampled queries (a same-tools split), `both` the two sets at once (in-sample)."""
    torch.set_num_threads(int(os.environ.get("ADAPTER_THREADS", "1")))
    cache = EmbeddingCache(Path(sys.argv[1]))
    groups = sys.argv[2:] or list(FORMS)
    pairs = [(a, b.split("+")) for a, b in (x.split(":") for x in os.environ.get("ADAPTER_PAIRS", PAIRS).split(","))]
    wanted = {t for _, targets in pairs for t in targets}
    samples = {"metatool": (3000, 1), "sealtools": (None, 0)}  # as `toolscout eval` (README Quality)
    test = {name: pv.prepare(cache, load_set(name, *samples[name])) for name in samples if name in wanted}
    sample = {q.qid for q in load_set("metatool", 3000, 1).queries}
    sources = {a for a, _ in pairs}
    train_sets = {}
    for name in ("metatool", "sealtools"):
        if name in sources or "both" in sources:
            train_sets[name] = [training_set(cache, name)]
    if "metatool-rest" in sources:
        train_sets["metatool-rest"] = [training_set(cache, "metatool", sample)]
    if "both" in sources:
        train_sets["both"] = train_sets["metatool"] + train_sets["sealtools"]
    for name, data in test.items():
        print(f"baseline | {name} | {pv.fmt(pv.run(data, BASE))}", flush=True)
    for g in groups:
        for form in FORMS[g]:
            kw = {k: v for k, v in form.items() if k != "where"}
            for source, targets in pairs:
                began = time.perf_counter()
                w, seen = train(train_sets[source], **kw)
                took = time.perf_counter() - began
                np.save(Path(sys.argv[1]).parent / f"W-{g}-{len(ADAPTERS)}-{source}.npy", w)
                for target in targets:
                    m = evaluate(test[target], f"{g}{form}{source}", w, form["where"], kw.get("sym", False))
                    print(f"{g} {form} | train {source} -> {target} | {pv.fmt(m)} | stop {seen['held_base']} -> "
                          f"{seen['held_best']} at epoch {seen['epochs']} {seen['history']} | "
                          f"|W-I| {np.linalg.norm(w - np.eye(384)):.2f} | {took:.0f}s", flush=True)


if __name__ == "__main__":
    main()
