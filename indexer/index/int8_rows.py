"""The reduced rows of a large catalog as int8 codes, scanned by ONNX Runtime's integer matrix product.

Past REDUCE_ABOVE tools the pool matrix scans each row's projection on its principal axes for the candidates it
then ranks exactly. As float32 those projections are 38 MB at 100k tools, more than the CPU's cache: the scan was
a read of main memory, 1.9 ms for one text and 5.0 ms for a long request's six on this 2-core machine (numpy,
whichever BLAS form was fastest). As int8 they are a quarter of that, and MLAS's u8 x s8 kernels multiply them in
0.56 and 0.95 ms. The codes only choose the rows the exact ranking sees, as the projections did: of each text's
exact pool of 100 they keep 99.37 % (float32 projections: 99.38 %; 537 short and long texts on the 100k catalog
of `toolscout bench scale`).

Each axis has its own scale (the principal components' spreads differ by an order of magnitude), folded into the
query: sum_k code_ik * scale_k * q_k, the query's folded values quantized with one scale of their own. Integer
products are exact, so a query's scores do not depend on the others scanned with it."""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np

from indexer.onnx_embedder import open_session

# A masked row's score: the lowest int32 whose negation is still an int32 (top_rows negates scores).
MASKED = -(2**31 - 1)
GROWTH_ROWS = 8192  # spare columns added at once: every call multiplies them all, so they stay few


def _scan_graph() -> bytes:
    """Y (queries x rows, int32) = (A - 128) @ B: A the queries as uint8 offset by 128, B the codes (axes x rows)."""
    from onnx import TensorProto, helper

    queries = helper.make_tensor_value_info("queries", TensorProto.UINT8, [None, None])
    codes = helper.make_tensor_value_info("codes", TensorProto.INT8, [None, None])
    scores = helper.make_tensor_value_info("scores", TensorProto.INT32, [None, None])
    offset = helper.make_tensor("offset", TensorProto.UINT8, [], [128])
    node = helper.make_node("MatMulInteger", ["queries", "codes", "offset"], ["scores"])
    graph = helper.make_graph([node], "int8_scan", [queries, codes], [scores], initializer=[offset])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()  # type: ignore[no-any-return]


def quantize(values: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Rows of values as int8 codes of `scales` per column (clipped to +-127)."""
    return np.clip(np.rint(values / scales), -127, 127).astype(np.int8)


class Int8Rows:
    """The codes of every row (one column per row: the queries are the product's left operand, so each query's
    scores come out as one contiguous row) and the scale of each axis. Not thread-safe: the pool matrix calls it
    under its own lock."""

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions
        self._codes = np.zeros((dimensions, 0), dtype=np.int8)
        self._scales = np.ones(dimensions, dtype=np.float32)
        self._session: Any = None
        # The codes wrapped for ONNX Runtime once per allocation: a NumPy input is copied at every run (12 MB at
        # 100k tools: 1.37 ms a scan instead of 0.56); the wrapper shares the array's memory, puts included.
        self._wrapped: Any = None
        self._session_lock = threading.Lock()

    def fit(self, reduced: np.ndarray) -> None:
        """New scales from the rows' spread on each axis (their largest magnitude), and every row's codes."""
        largest = np.abs(reduced).max(axis=0) if len(reduced) else np.ones(self.dimensions, dtype=np.float32)
        self._scales = (np.where(largest > 0, largest, 1.0) / 127.0).astype(np.float32)
        self._reserve(len(reduced))
        self._codes[:, : len(reduced)] = quantize(reduced, self._scales).T

    def put(self, row: int, reduced: np.ndarray) -> None:
        """One row's codes with the scales of the last fit (a value past an axis's spread then is clipped)."""
        self._reserve(row + 1)
        self._codes[:, row] = quantize(reduced, self._scales)

    def scores(self, projected: np.ndarray, used: int) -> np.ndarray:
        """(queries, used rows) int32 scores, in each query's order of the float products of its projection."""
        folded = projected * self._scales
        largest = np.abs(folded).max(axis=1, keepdims=True)
        codes = quantize(folded, np.where(largest > 0, largest, 1.0) / 127.0)
        offset = (codes.astype(np.int16) + 128).astype(np.uint8)
        out = self._scan().run(["scores"], {"queries": offset, "codes": self._wrapped})[0]
        return out[:, :used]  # type: ignore[no-any-return]

    def _reserve(self, rows: int) -> None:
        if rows > self._codes.shape[1]:
            grown = np.zeros((self.dimensions, rows + GROWTH_ROWS), dtype=np.int8)
            grown[:, : self._codes.shape[1]] = self._codes
            self._codes = grown
            self._wrapped = None

    def _scan(self) -> Any:
        with self._session_lock:
            if self._session is None:
                self._session = open_session(_scan_graph(), os.cpu_count() or 1)
        if self._wrapped is None:
            import onnxruntime as ort

            self._wrapped = ort.OrtValue.ortvalue_from_numpy(self._codes)
        return self._session
