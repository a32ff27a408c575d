"""The bundled MiniLM served by ONNX Runtime: same vectors as sentence-transformers, without importing torch."""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from indexer.fastest import Fastest, power_of_two_at_least
from indexer.onnx_export import Variant, ensure_exported, model_dir

logger = logging.getLogger(__name__)

Vector = list[float]
# Padded tokens in one forward pass. Measured on 4,495 catalog texts: batches of 32 texts / 2,048 tokens cost 14%
# less CPU than 64 / 8,192 (and 256-text batches 27% more).
MAX_BATCH_TOKENS = 2048
# From this many texts (a catalog, not a query) the batches are spread over one single-threaded run per core:
# 18% less CPU than one run using every core, whose threads wait on each other at every layer.
BULK_TEXTS = 256
# A text longer than the batch so far pads every text already in it. A forward pass costs about 1.2 ms plus
# 0.05 ms per padded token (this CPU, 2 threads), so a new batch is cheaper once the padding it saves exceeds
# ~24 tokens: a long request and its short parts are two passes, not one padded to the longest (30 -> 11 ms).
MAX_PADDING_TOKENS = 24
# Timed passes of each form per token count before a lone pass keeps the faster (`Fastest`): the two differ by
# 10-15 % either way (this 2-core Xeon: one short query 4.7-5.4 ms on one thread against 5.3-6.4 on two, a long
# request 14.0-14.5 against 15.1-16.0; the EPYC of an earlier round ran a lone query faster on two).
LONE_TRIALS = 5


def max_seq_length(source: Path) -> int:
    """sentence-transformers' truncation length (256 for all-MiniLM-L6-v2, not the tokenizer file's 128)."""
    config = source / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text()).get("max_seq_length", 256))
    return 256


def load_tokenizer(source: Path, max_length: int) -> Any:
    """The fast tokenizer from the model's tokenizer.json: truncation at `max_length`, no padding (done per batch)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.enable_truncation(max_length)
    tokenizer.no_padding()
    return tokenizer


def open_session(model: Path | bytes, threads: int | None, spinning: bool = False) -> Any:
    """An ONNX Runtime CPU session of a model file (or a serialized model) with `threads` intra-op threads (all
    cores when None)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or os.cpu_count() or 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # Spinning workers keep cores busy between runs; on a shared machine that costs more than it saves.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    source = str(model) if isinstance(model, Path) else model
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


class OnnxEmbedder:
    """Mean-pooled, unit-length MiniLM vectors from an exported ONNX graph, batched by token length."""

    dimension = 384

    def __init__(
        self,
        model: str = "bundled",
        models_dir: Path = Path(".toolscout/models"),
        variant: Variant = "int8",
        batch_size: int = 32,
        threads: int | None = None,
    ) -> None:
        self.model_name = model
        self.models_dir = models_dir
        self.variant = variant
        self.batch_size = batch_size
        self.threads = threads
        self.path: Path | None = None
        self._session: Any = None
        # Further sessions by intra-op threads: 1 for bulk indexing (run from several threads at once), the cores
        # less one for query passes under load.
        self._sessions: dict[int, Any] = {}
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        # A pass outside load: on every core or on one fewer, whichever is faster on this machine for its size.
        self._lone = Fastest(LONE_TRIALS)
        self._lanes: ThreadPoolExecutor | None = None  # the lanes of a lone pass side by side, beside the caller's

    def _load(self) -> tuple[Any, Any]:
        with self._lock:
            if self._session is None:
                source = model_dir(self.model_name)
                self.path = ensure_exported(self.models_dir, self.model_name, self.variant)
                self._tokenizer = load_tokenizer(source, max_seq_length(source))
                self._session = open_session(self.path, self.threads)
                self.dimension = int(self._session.get_outputs()[0].shape[-1] or 384)
                logger.info(
                    "loaded ONNX embedding model %s (%s, %d threads)",
                    self.path,
                    self.variant,
                    self.threads or os.cpu_count() or 1,
                )
        return self._session, self._tokenizer

    def warm(self) -> None:
        """Load the model and run one embedding so the first query pays nothing."""
        self.embed(["warm up"])
        if (self.threads or os.cpu_count() or 1) > 1:
            self._session_with(1)  # what lanes side by side run on

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_under_load(self, texts: Sequence[str]) -> list[Vector]:
        """The same vectors from a run on one intra-op thread fewer than the cores, for a pass under load: the
        event loop keeps a core busy then, and a thread that competes with it for that core costs CPU (waiting on
        the others at every layer) without shortening the pass."""
        return self.embed_array(texts, under_load=True).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str], under_load: bool = False) -> np.ndarray:
        """Vectors as a (len(texts), dimension) float32 array; texts of similar length share a batch."""
        session, tokenizer = self._load()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # sentence-transformers strips each text before tokenizing.
        encodings = tokenizer.encode_batch([str(text).strip() for text in texts])
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        lengths = [len(e.ids) for e in encodings]
        batches = self._batches(order, lengths)
        workers = self.threads or os.cpu_count() or 1
        if len(texts) < BULK_TEXTS or workers < 2:

            def run_on(on: Any) -> None:
                self._fill(out, on, encodings, batches)

            if workers < 2:
                run_on(session)
            elif under_load:
                run_on(self._session_with(workers - 1))
            else:
                forms = {
                    "every core": lambda: run_on(session),
                    "one core fewer": lambda: run_on(self._session_with(workers - 1)),
                }
                if len(texts) > 1:
                    forms["side by side"] = lambda: self._side_by_side(encodings, lengths, out, workers)
                self._lone.call((min(len(texts), workers), token_bucket(sum(lengths))), forms)
            return out
        bulk = self._session_with(1)
        # Longest batches first, so no worker is left with a long one at the end.
        with ThreadPoolExecutor(workers, thread_name_prefix="embed-bulk") as pool:
            list(pool.map(lambda chunk: self._fill(out, bulk, encodings, [chunk]), batches[::-1]))
        return out

    def lone_choices(self) -> dict[tuple[int, int], str]:
        """The form a pass outside load runs in, chosen so far per (texts up to the cores, `token_bucket`)."""
        return self._lone.choices()  # type: ignore[return-value]

    def _side_by_side(self, encodings: list[Any], lengths: list[int], out: np.ndarray, workers: int) -> None:
        """A lone request's texts split into one lane per core, each lane's passes on one intra-op thread, the
        lanes run at once: a long request and its parts (two passes, one after the other otherwise) end in about
        the time of the longer (this 2-core Xeon: 4.7 texts 4.8-7.5 ms against 6.9-8.6 on one pass at a time)."""
        lanes = balanced_lanes(lengths, workers)
        single = self._session_with(1)

        def run(lane: list[int]) -> None:
            self._fill(out, single, encodings, self._batches(sorted(lane, key=lengths.__getitem__), lengths))

        with self._lock:
            if self._lanes is None:
                self._lanes = ThreadPoolExecutor(workers - 1, thread_name_prefix="embed-lane")
        others = [self._lanes.submit(run, lane) for lane in lanes[1:]]
        run(lanes[0])
        for other in others:
            other.result()

    def _session_with(self, threads: int) -> Any:
        """A session of the loaded model with `threads` intra-op threads, opened on first use."""
        with self._lock:
            if threads not in self._sessions:
                assert self.path is not None
                self._sessions[threads] = open_session(self.path, threads)
            return self._sessions[threads]

    def _batches(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Consecutive runs of the length-sorted texts: at most batch_size texts and MAX_BATCH_TOKENS padded
        tokens each (attention memory grows with rows x tokens squared), and at most MAX_PADDING_TOKENS of
        padding added by the longest."""
        batches: list[list[int]] = []
        current: list[int] = []
        for i in order:
            if current and (
                len(current) >= self.batch_size
                or (len(current) + 1) * lengths[i] > MAX_BATCH_TOKENS
                or len(current) * (lengths[i] - lengths[current[-1]]) > MAX_PADDING_TOKENS
            ):
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        return batches

    def _fill(self, out: np.ndarray, session: Any, encodings: list[Any], batches: list[list[int]]) -> None:
        """Each batch's forward pass on `session`, its vectors written to its texts' rows of `out`."""
        for chunk in batches:
            out[chunk] = self._run(session, [encodings[i].ids for i in chunk])

    @staticmethod
    def _run(session: Any, ids: list[list[int]]) -> np.ndarray:
        """One forward pass over right-padded token ids."""
        width = max(len(row) for row in ids)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, tokens in enumerate(ids):
            input_ids[row, : len(tokens)] = tokens
            mask[row, : len(tokens)] = 1
        feed = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        return session.run(None, feed)[0]  # type: ignore[no-any-return]


def token_bucket(tokens: int) -> int:
    """The token counts of a pass that share one choice of form: by powers of two."""
    return power_of_two_at_least(tokens)


def balanced_lanes(lengths: list[int], lanes: int) -> list[list[int]]:
    """The texts (by index) dealt longest first to the lane with the fewest tokens so far; no lane is empty (at
    most as many lanes as texts)."""
    dealt: list[list[int]] = [[] for _ in range(min(lanes, len(lengths)))]
    work = [0] * len(dealt)
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        lane = work.index(min(work))
        dealt[lane].append(i)
        work[lane] += lengths[i]
    return dealt
