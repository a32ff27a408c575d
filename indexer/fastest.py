"""Of interchangeable ways to do one thing, the fastest on this machine: each timed on the live calls themselves.

Which BLAS form multiplies a few queries by a large matrix fastest, or whether a lone query's forward pass runs
faster on every core or on one thread fewer, differs between machines (by 2-3 x for the first, 10-15 % either way
for the second) and cannot be read off the CPU's name. So the calls that have to run anyway are the trials: each
form `trials` times per key (a query count, a token count), in turn, then the form with the fastest median is kept
for that key."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


class Fastest:
    """Runs each call in the form chosen for its key, or, while the key's trials last, in its least-timed form.

    A race between threads can time one call twice or a form once more; neither changes what a call returns."""

    def __init__(self, trials: int) -> None:
        self.trials = trials
        self._timings: dict[Hashable, dict[str, list[float]]] = {}
        self._chosen: dict[Hashable, str] = {}

    def call(self, key: Hashable, forms: Mapping[str, Callable[..., T]], *args: Any) -> T:
        """`forms[name](*args)` for the name chosen for `key`, timed while the key's trials last."""
        chosen = self._chosen.get(key)
        if chosen is not None:
            return forms[chosen](*args)
        timings = self._timings.setdefault(key, {name: [] for name in forms})
        name = min(timings, key=lambda form: len(timings[form]))
        start = time.perf_counter()
        result = forms[name](*args)
        timings[name].append(time.perf_counter() - start)
        if all(len(seconds) >= self.trials for seconds in timings.values()):
            self._chosen[key] = min(timings, key=lambda form: float(np.median(timings[form])))
        return result

    def choices(self) -> dict[Hashable, str]:
        """The form chosen so far per key."""
        return dict(self._chosen)

    def timings(self, key: Hashable) -> dict[str, list[float]]:
        """The seconds each form took in the trials of a key."""
        return {name: list(seconds) for name, seconds in self._timings.get(key, {}).items()}

    def forget(self) -> None:
        """Drop every choice and timing: the trials run again (what they measured has changed)."""
        self._timings.clear()
        self._chosen.clear()


def power_of_two_at_least(count: int) -> int:
    """The smallest power of two >= count (1 for 0): the sizes that share one choice once sizes spread widely."""
    return 1 << max(count - 1, 0).bit_length()
