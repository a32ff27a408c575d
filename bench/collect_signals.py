"""Collect per-signal candidate scores for an evaluation set once, so fusion variants can be tuned offline.

Usage: python bench/collect_signals.py CATALOG QUERIES OUT.pkl [--max-queries N]"""

from __future__ import annotations

import argparse
import asyncio
import pickle
import tempfile
from pathlib import Path

from indexer.index.base import DENSE_FIELDS, SearchFilter, SignalQuery
from indexer.intents import split_intents
from service.catalog.files import load_catalog_file
from service.catalog.service import register_tools
from service.resources import build_resources, close_resources, start_resources
from service.search.evaluation import load_queries
from service.search.service import start_search
from service.settings import Settings


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("catalog", type=Path)
    parser.add_argument("queries", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--max-queries", type=int, default=None)
    args = parser.parse_args()
    catalog = load_catalog_file(args.catalog)
    queries = load_queries(args.queries, args.max_queries, 0)
    with tempfile.TemporaryDirectory() as tmp:
        resources = build_resources(Settings(data_dir=Path(tmp)))
        await start_resources(resources)
        await start_search(resources)
        await register_tools(resources, catalog.tools)
        rows = []
        all_texts = sorted({t for q in queries for t in [q.text, *split_intents(q.text)]})
        print(f"embedding {len(all_texts)} query texts", flush=True)
        embedded = dict(zip(all_texts, resources.embedder.inner.embed(all_texts), strict=True))
        for q in queries:
            texts = [q.text, *split_intents(q.text)]
            vectors = [embedded[t] for t in texts]
            signal_queries = []
            for text, vector in zip(texts, vectors, strict=True):
                signal_queries += [SignalQuery(f, 100, dense=vector) for f in DENSE_FIELDS]
                signal_queries.append(SignalQuery("lexical", 100, sparse=resources.encoder.encode_query(text)))
            hits = resources.index.search(signal_queries, SearchFilter())
            per_text = []
            for t in range(len(texts)):
                per_text.append({
                    s: {catalog.ids.get(h.qualified_name, h.qualified_name): h.score for h in hits[t * 4 + i]}
                    for i, s in enumerate(("name", "description", "params", "lexical"))
                })
            exact = [catalog.ids.get(n, n) for n in resources.retriever.directory.exact(q.text, SearchFilter())]
            rows.append({"qid": q.qid, "category": q.category, "relevant": q.relevant, "texts": texts,
                         "signals": per_text, "exact": exact})
        await close_resources(resources)
    args.out.write_bytes(pickle.dumps(rows))
    print(f"{len(rows)} queries collected into {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
