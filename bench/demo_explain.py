"""Per-signal breakdown of one request over the bundled real catalogs, offline (bench/pool_variants.py's pipeline
plus the server signal the service adds for described servers), today and with centred field scores.

Usage: python bench/demo_explain.py EMBEDDINGS.pkl "remember that Alice works at Acme" [TOOL ...]"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bench import pool_variants as pv
from bench.embed_cache import EmbeddingCache
from bench.offline import EvalSet, demo_tools
from indexer.documents import build_document
from indexer.intents import split_intents
from indexer.names import READ_VERBS, asks, lead_verb, name_verb, query_stems
from indexer.servers import server_document, server_info


def main() -> None:
    cache = EmbeddingCache(Path(sys.argv[1]))
    query = sys.argv[2]
    watch = sys.argv[3:]
    tools, raw = demo_tools()
    texts = [query, *split_intents(query)]
    s = EvalSet("demo", tools, [t.qualified_name for t in tools], raw, [], texts, [], [], [])
    docs = [build_document(t) for t in tools]
    q = cache.embed(texts)
    d = {f: cache.embed([getattr(x, f) for x in docs]) for f in pv.FIELDS}
    # server documents (as bench/servers.py / the service: only servers with an info block)
    servers = sorted({t.server for t in tools})
    info = {t.server: server_info(r.get("server_info")) for t, r in zip(tools, raw, strict=True)}
    sdocs = cache.embed([server_document(sv, info[sv]) for sv in servers])
    col = np.array([servers.index(t.server) for t in tools])
    server_cos = (q @ sdocs.T)[:, col]
    described = np.array([bool(set(info[t.server]) - {"name"}) for t in tools])
    from bench.offline import lexical_signal
    from indexer.lexical import Bm25Encoder

    enc = Bm25Encoder()
    lex = lexical_signal(s, [enc.encode_document(x.lexical) for x in docs])
    verbs = np.array([name_verb(t.name, t.server) for t in tools])
    for label, alpha in (("today", 0.0), ("centred fields (alpha 1, pool uncentred)", 1.0)):
        print(f"=== {label}: {query!r} (texts: {texts})")
        for r, text in enumerate(texts):
            scores = {f: q[r] @ (pv.unit(d[f] - alpha * d[f].mean(axis=0)) if alpha else d[f]).T for f in pv.FIELDS}
            scan = q[r] @ pv.unit(d["name"] + d["description"] + d["params"]).T
            lex_hits = pv.top_mask(lex[r : r + 1], pv.S.candidates, lex[r : r + 1] > 0)[0]
            pool = pv.top_mask(scan[None], pv.S.pool_candidates)[0] | lex_hits
            hits = {f: pv.top_mask(scores[f][None], pv.S.candidates, pool[None])[0] for f in pv.FIELDS}
            union = lex_hits | hits["name"] | hits["description"] | hits["params"]
            parts = {}
            for f in pv.FIELDS:
                parts[f] = pv.WEIGHTS[f] * pv.zscore(scores[f][None], hits[f][None], union[None])[0]
            parts["lexical"] = pv.WEIGHTS["lexical"] * pv.zscore(lex[r : r + 1], lex_hits[None], union[None])[0]
            cover = union & described
            parts["server"] = pv.S.weight_server * pv.zscore(server_cos[r][None], cover[None], cover[None])[0]
            total = sum(parts.values())
            total = np.where(union, total, -np.inf)
            lv = lead_verb(text)
            head = np.argsort(-total)[:3]
            parts["lead_verb"] = np.zeros(len(tools))
            for j in head:
                if lv and verbs[j] == lv:
                    parts["lead_verb"][j] = pv.S.weight_lead_verb
            total = total + parts["lead_verb"]
            parts["question_read"] = np.zeros(len(tools))
            if asks(text):
                for j in np.argsort(-total)[:3]:
                    if verbs[j] in READ_VERBS:
                        parts["question_read"][j] = pv.S.weight_question_read
            total = total + parts["question_read"]
            stems = query_stems(query)
            parts["name_verb"] = np.array([pv.S.weight_name_verb if v and v in stems else 0.0 for v in verbs])
            total = total + parts["name_verb"]
            print(f"-- text {r}: {text!r} lead verb {lv!r}")
            order = [j for j in np.argsort(-total) if np.isfinite(total[j])]
            watched = [j for j in range(len(tools)) if tools[j].qualified_name in watch and j not in order[:6]]
            shown = order[:6] + watched
            for j in shown:
                rank = order.index(j) + 1 if j in order else None
                sig = " ".join(f"{k}={v[j]:+.3f}" for k, v in parts.items() if v[j])
                cos = " ".join(f"{f[:4]}={scores[f][j]:.3f}" for f in pv.FIELDS)
                print(f"  #{rank} {tools[j].qualified_name:40s} {total[j]:+.3f} | {sig} | cos {cos} lex={lex[r, j]:.2f}"
                      f" srv={server_cos[r, j]:.3f}")


if __name__ == "__main__":
    main()
