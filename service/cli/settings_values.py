"""Which variable holds a list setting's value that is not a JSON list: pydantic-settings only says "error
parsing value for field 'policy'" (with a traceback), not which variable or what form it wants."""

from __future__ import annotations

import argparse
import json
import os
import re
import typing
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

from dotenv import dotenv_values
from pydantic import BaseModel
from pydantic_settings import BaseSettings

# user:password@ in a URL a setting was given (TOOLSCOUT_DB__URL, a Redis URL): never printed.
URL_PASSWORD = re.compile(r"(?<=://)([^/@:]*):[^/@]*@")
# The form a variable of such a setting takes, by the type it holds.
FORMS = {list: '["a", "b"]', set: '["a", "b"]', tuple: '["a", "b"]', dict: '{"key": "value"}'}


def _structured(model: type[BaseModel], prefix: str) -> Iterator[tuple[str, type]]:
    """(variable, list or dict) of each setting of the model whose variable holds JSON, nested sections included."""
    for name, field in model.model_fields.items():
        variable = f"{prefix}{name}".upper()
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _structured(annotation, variable + "__")
            continue
        kinds = [typing.get_origin(a) or a for a in (typing.get_args(annotation) or (annotation,))]
        kinds.append(typing.get_origin(annotation) or annotation)
        kind = next((k for k in kinds if k in FORMS), None)
        if kind is not None:
            yield variable, kind


def _given(settings: type[BaseSettings]) -> dict[str, str]:
    """The variables as the settings read them: the .env file's, overridden by the environment's."""
    values: dict[str, str] = {}
    env_file = settings.model_config.get("env_file")
    if isinstance(env_file, str) and Path(env_file).is_file():
        values.update({k.upper(): v for k, v in dotenv_values(env_file).items() if v is not None})
    values.update({k.upper(): v for k, v in os.environ.items()})
    return values


def unparsed_values(settings: type[BaseSettings]) -> list[str]:
    """One line per variable of a list (or mapping) setting whose value is not JSON, naming the form it takes."""
    given = _given(settings)
    prefix = str(settings.model_config.get("env_prefix", ""))
    lines = []
    for variable, kind in _structured(settings, prefix):
        value = given.get(variable)
        if value is None:
            continue
        try:
            json.loads(value)
        except ValueError:
            shown = without_password(value)
            lines.append(f"  {variable}: expected JSON, such as {variable}='{FORMS[kind]}' (given: {shown!r})")
    return lines


def without_password(text: str) -> str:
    """The text with the password of any URL in it replaced by ***."""
    return URL_PASSWORD.sub(r"\1:***@", text)


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 1 to 65535, as the port settings take."""
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a port from 1 to 65535")
    return port


def result_count(text: str) -> int:
    """An argparse type: how many results, 1 or more (`search -k 0` was the API's `/body/k` pointer)."""
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if count < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {count}")
    return count


def iso_time(text: str) -> datetime:
    """An argparse type: a date or a date and time in ISO 8601 (argparse said "invalid fromisoformat value")."""
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 date or time: {text!r} (e.g. 2026-12-01 or 2026-12-01T08:00, UTC)"
        ) from None


def days_back(text: str) -> float:
    """An argparse type: a window's length in days, above 0 and within the calendar (-3 made an empty window)."""
    try:
        days = float(text)
    except ValueError:
        days = float("nan")
    if not days > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"expected a number of days above 0, such as 7 or 0.5, got {text!r}")
    try:
        datetime.now(UTC) - timedelta(days=days)
    except OverflowError:
        raise argparse.ArgumentTypeError(f"{text} days ago is before the year 1") from None
    return days
