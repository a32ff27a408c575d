"""Secrets out of logs and health views: configured env and header values replaced in upstream stderr lines."""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "***"
MIN_SECRET_CHARS = 4  # shorter values (1, true, UTC) would blank out ordinary words


class Scrubber:
    """Replaces every occurrence of the given secret values with `***`."""

    def __init__(self, secrets: Iterable[str]) -> None:
        values = sorted({s for s in secrets if len(s) >= MIN_SECRET_CHARS}, key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(v) for v in values)) if values else None

    def __call__(self, text: str) -> str:
        """The text with every secret value redacted."""
        return self._pattern.sub(REDACTED, text) if self._pattern is not None else text


def secret_values(env: dict[str, str], headers: dict[str, str]) -> list[str]:
    """The values to scrub: every configured env value and header value, and a bearer token on its own."""
    values = [*env.values(), *headers.values()]
    for value in headers.values():
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in ("bearer", "basic", "token"):
            values.append(token)
    return values
