"""`toolscout bench embedder`: ONNX Runtime (fp32, int8) against the torch sentence-transformers model, in one run:
cosine per text on real tool and query texts, single-query latency, batch throughput, serving RSS, install size."""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from indexer.documents import build_document
from indexer.embedding import Embedder, SentenceTransformerEmbedder
from indexer.index.base import DENSE_FIELDS
from indexer.onnx_embedder import OnnxEmbedder
from indexer.tools import validate_batch
from service.benchmarks import BenchFailed, save_report
from service.benchmarks.arguments import positive_int
from service.benchmarks.datasets import SHARED, missing_shared
from service.catalog.files import load_catalog_file
from service.settings import Settings

SHORT_QUERY = "find the weather forecast for tomorrow"

# A serving process: the app with its lifespan, a few tools registered, one search; then its peak RSS.
SERVE_PROBE = """
import json, sys
from pathlib import Path
from fastapi.testclient import TestClient
from service.main import create_app
from service.settings import Settings
settings = Settings(data_dir=Path(sys.argv[1]), demo_catalog=False)
settings.embedding.backend = sys.argv[2]
settings.embedding.models_dir = Path(sys.argv[3])
settings.execution.demo_servers = False
tools = json.loads(Path(sys.argv[4]).read_text())
with TestClient(create_app(settings), base_url="http://localhost") as client:
    client.post("/tools", json={"tools": tools}).raise_for_status()
    client.post("/search", json={"query": "weather forecast"}).raise_for_status()
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the (large) parent that forked this process.
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"peak_rss_mb": int(hwm.split()[1]) / 1024,
                  "torch_imported": "torch" in sys.modules,
                  "sentence_transformers_imported": "sentence_transformers" in sys.modules}))
"""


def register_bench(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = subparsers.add_parser("embedder", help="compare ONNX (fp32, int8) and torch: cosine, latency, speed, RSS")
    parser.add_argument("--texts", type=positive_int, default=3000, help="real texts compared (default 3000)")
    parser.add_argument(
        "--repeats", type=positive_int, default=300, help="single-query embeds timed per backend (default 300)"
    )
    parser.add_argument(
        "--throughput-texts", type=positive_int, default=1000, help="texts embedded at once (default 1000)"
    )
    parser.add_argument("--json", type=Path, default=None, dest="json_out", help="also write the JSON here")
    parser.set_defaults(func=run)


def real_texts(limit: int, seed: int = 1) -> list[str]:
    """Distinct field texts of the tools in shared/catalogs and shared/eval, plus eval queries; a seeded sample."""
    texts: list[str] = []
    for path in sorted((SHARED / "catalogs").glob("*.json")) + sorted((SHARED / "eval").glob("*/catalog.jsonl")):
        for tool in validate_batch(load_catalog_file(path).tools).tools:
            document = build_document(tool)
            texts.extend(getattr(document, field) for field in DENSE_FIELDS)
    for path in sorted((SHARED / "eval").glob("*/queries.jsonl")):
        texts.extend(json.loads(line)["query"] for line in path.read_text().splitlines()[:2000] if line.strip())
    unique = sorted({text for text in texts if text.strip()})
    if not unique:
        raise BenchFailed(missing_shared("real texts to embed", "copy the dev sets there to compare the backends"))
    return random.Random(seed).sample(unique, min(limit, len(unique)))


def _timed_single(embedders: dict[str, Embedder], repeats: int) -> dict[str, float]:
    """Median ms of one short query per backend, interleaved in rounds so load drifts hit all alike."""
    samples: dict[str, list[float]] = {name: [] for name in embedders}
    rounds = 10
    for _ in range(rounds):
        for name, embedder in embedders.items():
            for _ in range(max(1, repeats // rounds)):
                started = time.perf_counter()
                embedder.embed([SHORT_QUERY])
                samples[name].append((time.perf_counter() - started) * 1000)
    return {name: round(statistics.median(values), 2) for name, values in samples.items()}


def _throughput(embedder: Embedder, texts: list[str]) -> float:
    started = time.perf_counter()
    embedder.embed(texts)
    return round(len(texts) / (time.perf_counter() - started), 1)


def _serve_rss(backend: str, models_dir: Path) -> dict[str, Any]:
    """Peak RSS of a child process serving with this backend."""
    with tempfile.TemporaryDirectory(prefix="toolscout-rss-") as tmp:
        tools = Path(tmp) / "tools.json"
        tools.write_text(json.dumps(load_catalog_file(SHARED / "catalogs" / "github.json").tools))
        done = subprocess.run(
            [sys.executable, "-c", SERVE_PROBE, tmp, backend, str(models_dir), str(tools)],
            capture_output=True,
            text=True,
            check=True,
        )
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _install_mb(module: str) -> float:
    """Disk size of an installed package folder."""
    spec = __import__("importlib.util").util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        return 0.0
    root = Path(next(iter(spec.submodule_search_locations)))
    return round(sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) / 2**20, 1)


def _cosines(reference: np.ndarray, vectors: np.ndarray) -> dict[str, float]:
    cos = (reference * vectors).sum(axis=1)
    return {
        "min": round(float(cos.min()), 4),
        "p1": round(float(np.percentile(cos, 1)), 4),
        "median": round(float(np.median(cos)), 4),
        "mean": round(float(cos.mean()), 4),
    }


def run(args: argparse.Namespace) -> int:
    settings = Settings()
    texts = real_texts(args.texts)
    torch_embedder = SentenceTransformerEmbedder()
    onnx = {variant: OnnxEmbedder(models_dir=settings.models_dir, variant=variant) for variant in ("fp32", "int8")}
    reference = np.asarray(torch_embedder.embed(texts), dtype=np.float32)
    result: dict[str, Any] = {"texts": len(texts), "cosine_to_torch": {}}
    for variant, embedder in onnx.items():
        result["cosine_to_torch"][variant] = _cosines(reference, embedder.embed_array(texts))
    embedders: dict[str, Embedder] = {"torch": torch_embedder, "onnx_fp32": onnx["fp32"], "onnx_int8": onnx["int8"]}
    result["single_query_ms"] = _timed_single(embedders, args.repeats)
    sample = texts[: args.throughput_texts]
    result["batch_texts_per_s"] = {name: _throughput(embedder, sample) for name, embedder in embedders.items()}
    result["serving_process"] = {backend: _serve_rss(backend, settings.models_dir) for backend in ("onnx", "torch")}
    result["install_mb"] = {
        name: _install_mb(name) for name in ("torch", "transformers", "sentence_transformers", "onnxruntime", "onnx")
    }
    print(json.dumps(result, indent=2))
    save_report(args.json_out, result)
    return 0
