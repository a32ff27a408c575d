"""Values that decay with a half-life: the counts learning reads."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime


def decay_factor(elapsed_seconds: float, half_life_days: float) -> float:
    """2^(-elapsed / half-life); 1 for a non-positive elapsed time."""
    if elapsed_seconds <= 0:
        return 1.0
    return math.pow(2.0, -elapsed_seconds / (half_life_days * 86400.0))


@dataclass
class Decayed:
    """Values that all decay with the same half-life, stored as of `ref` (the latest event time)."""

    values: list[float]
    ref: datetime | None = None

    def add(self, at: datetime, weights: Iterable[float], half_life_days: float) -> None:
        """Count an event of time `at` (events may arrive slightly out of order)."""
        weights = list(weights)
        if self.ref is None:
            self.values, self.ref = [v + w for v, w in zip(self.values, weights, strict=True)], at
        elif at >= self.ref:
            factor = decay_factor((at - self.ref).total_seconds(), half_life_days)
            self.values = [v * factor + w for v, w in zip(self.values, weights, strict=True)]
            self.ref = at
        else:
            factor = decay_factor((self.ref - at).total_seconds(), half_life_days)
            self.values = [v + w * factor for v, w in zip(self.values, weights, strict=True)]

    def at(self, now: datetime, half_life_days: float) -> list[float]:
        """The values decayed to `now`."""
        if self.ref is None:
            return [0.0 for _ in self.values]
        factor = decay_factor((now - self.ref).total_seconds(), half_life_days)
        return [v * factor for v in self.values]
