"""Compare the Qdrant adapter's server-side fusion with the embedded engine on the dev sets.

    python bench/compare_qdrant_fusion.py [--max-queries N] [--seed S]

Runs `toolscout eval` (service.evaluation.evaluate) on ../shared/eval/{metatool,sealtools} with: the embedded
engine (client-side z-score fusion), qdrant-client ':memory:' with the same client-side fusion, and ':memory:'
with the prefetch + fusion queries a Qdrant server runs (weighted RRF, DBSF). The catalog is embedded once
and shared by all runs (a memo in front of the model)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from pathlib import Path
from typing import Any

from indexer.embedding import SentenceTransformerEmbedder
from service.search.evaluation import evaluate
from service.settings import IndexSettings, Settings

EVAL = Path(os.environ.get("TOOLSCOUT_EVAL_DIR", "/work/shared/eval"))
KEYS = ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr")


class MemoEmbedder:
    """The model, remembering every text it embedded."""

    def __init__(self) -> None:
        self.inner = SentenceTransformerEmbedder()
        self.model_name = self.inner.model_name
        self._memo: dict[str, list[float]] = {}

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.inner.embed(missing), strict=True))
        return [self._memo[t] for t in texts]


CONFIGS: dict[str, dict[str, Any]] = {
    "edge (client z-score fusion)": {"backend": "edge"},
    "qdrant :memory: client fusion": {"backend": "qdrant", "url": ":memory:", "server_fusion": False},
    "qdrant :memory: server RRF": {"backend": "qdrant", "url": ":memory:", "fusion": "rrf"},
    "qdrant :memory: server DBSF": {"backend": "qdrant", "url": ":memory:", "fusion": "dbsf"},
}


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-queries", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    embedder = MemoEmbedder()
    rows = []
    for name in ("metatool", "sealtools"):
        for label, index in CONFIGS.items():
            settings = Settings(demo_catalog=False, index=IndexSettings(**index))
            result = await evaluate(
                EVAL / name / "catalog.jsonl",
                EVAL / name / "queries.jsonl",
                settings=settings,
                embedder=embedder,
                max_queries=args.max_queries,
                seed=args.seed,
            )
            row = {
                "set": name,
                "config": label,
                **{k: round(result[k], 3) for k in KEYS},
                "p50_ms": result["latency_ms"]["p50"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"| set | index | {' | '.join(KEYS)} | p50 ms |\n|---|---|{'---|' * (len(KEYS) + 1)}")
    for row in rows:
        print(
            f"| {row['set']} | {row['config']} | " + " | ".join(f"{row[k]:.3f}" for k in KEYS) + f" | {row['p50_ms']} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
