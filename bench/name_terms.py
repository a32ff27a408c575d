"""Name words against parameter words, offline: variants of the lexical document (BM25F-like field weights by
repetition) and a bonus for the verb a request leads with, measured on both dev sets and the real catalogs.
Neither paid (docs/quality-history.md), so the service has neither.

Usage: python bench/name_terms.py EMBEDDINGS.pkl (a bench/embed_cache.py cache; missing texts are embedded)"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

from bench.crossfit import prepare
from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, fused_scores, lexical_signal, load_demo_set, load_set, metrics, query_scores, zclip
from bench.servers import candidates, server_signal
from indexer.documents import build_document
from indexer.lexical import Bm25Encoder, _stem
from indexer.names import name_verb
from service.settings import SearchSettings


def lexical_variant(s: EvalSet, name: int, description: int, params: int) -> np.ndarray:
    """BM25 over a document whose name, description and parameter texts are repeated these many times."""
    encoder = Bm25Encoder()
    texts = []
    for tool in s.tools:
        d = build_document(tool)
        parts = [d.name] * name + [tool.description] * description + ([d.params] if d.params != d.name else []) * params
        texts.append(" ".join(p for p in [*parts, " ".join(tool.tags)] if p))
    return lexical_signal(s, [encoder.encode_document(t) for t in texts], encoder)


OPENERS = frozenset("please kindly can could would will you i we me us let lets help want need to just".split())
QUESTIONS = frozenset("what which who whom whose when where why how is are was were do does did".split())


def lead_verb(query: str) -> str:
    """The stemmed first word of a request past its openers ("please", "can you"); empty for a question."""
    for word in re.findall(r"[a-z0-9]+", query.lower()):
        if word not in OPENERS:
            return _stem(word) if word not in QUESTIONS else ""
    return ""


def lead_verbs(s: EvalSet) -> np.ndarray:
    """1 where a text leads with the verb of a tool's name (indexer.names.lead_verb, as the service applies it)."""
    verbs = np.array([name_verb(t.name, t.server) for t in s.tools])
    out = np.zeros((len(s.texts), len(s.tools)))
    for i, rows in enumerate(s.text_rows):
        lead = lead_verb(s.queries[i].text)
        for r in rows:
            out[r] = (verbs == lead) if lead else 0.0
    return out


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    d = SearchSettings()
    base = {"name": d.weight_name, "description": d.weight_description, "params": d.weight_params,
            "lexical": d.weight_lexical, "name_verb": d.weight_name_verb, "server": d.weight_server}
    for s in (load_set("metatool", 3000, 1), load_set("sealtools", None, 0), load_demo_set()):
        z = prepare(cache, s)
        mask = candidates(s)
        z["server"] = server_signal(cache, s, mask)
        z["lead_verb"] = lead_verbs(s)
        variants: list[tuple[str, dict[str, float], dict[str, np.ndarray]]] = [("today", base, {})]
        for reps in ((2, 2, 1), (2, 1, 1), (1, 1, 0), (3, 2, 1)):
            lex = s.signals["lexical"] if reps == (1, 1, 1) else lexical_variant(s, *reps)
            variants.append((f"lexical x{reps}", base, {"lexical": zclip(lex, lex > 0)}))
        for w in (0.2, 0.4, 0.6, 0.8):
            variants.append((f"lead_verb {w}", {**base, "lead_verb": w}, {}))
        for label, weights, swap in variants:
            per_text = np.where(mask, fused_scores(s, weights, {**z, **swap}), -np.inf)
            m = metrics(s, query_scores(s, per_text))
            print(f"{s.name:10s} {label:22s} R@1 {m['recall@1']:.4f} R@5 {m['recall@5']:.4f} MRR {m['mrr']:.4f}",
                  flush=True)


if __name__ == "__main__":
    main()
