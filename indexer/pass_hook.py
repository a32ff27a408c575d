"""A callback run on an embedder's thread as its model's pass starts (after tokenizing: the pass no longer holds
the GIL then), set by the query micro-batcher (indexer/batching.py) so that a lone search uses the free core."""

from __future__ import annotations

import threading
from collections.abc import Callable

_pass_hooks = threading.local()


def before_pass(callback: Callable[[], None] | None) -> None:
    """Have `callback` run on this thread right before the next forward pass it starts (`passing`), or forget
    the one set (None)."""
    _pass_hooks.callback = callback


def passing() -> None:
    """Run (once) the callback `before_pass` set on this thread: an embedder calls it as its model's pass starts,
    after tokenizing, when the pass no longer holds the GIL (indexer/batching.py: a lone search's other work runs
    meanwhile); whoever set it calls it again after the pass, for an embedder that does not."""
    callback = getattr(_pass_hooks, "callback", None)
    if callback is not None:
        _pass_hooks.callback = None
        callback()
