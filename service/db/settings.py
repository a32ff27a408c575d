"""The database section of the settings, checked when read: a URL the service cannot open stops it at start."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

SUPPORTED = "sqlite:///PATH or postgresql+psycopg://USER:PASSWORD@HOST:PORT/DATABASE"


class DatabaseSettings(BaseModel):
    """SQL catalog of record; SQLite under the data folder unless a URL is given."""

    model_config = ConfigDict(extra="forbid")  # as service.settings.Section's (which imports this module)

    url: str | None = None
    echo: bool = False
    # PostgreSQL: a connection attempt, and an open connection whose server leaves what it was sent unanswered (a
    # partition or a stalled server), give up after this long: each execution-log batch goes to the spill file and
    # /readyz answers "not ready" instead of both waiting for the kernel (~15 min).
    timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    # A folder every replica mounts (a shared volume) for the logs' spill files: a replica replays the files of
    # replicas that are gone, so a replica recreated with an empty data folder during an outage loses nothing.
    # Empty: the data folder (replayed only by a start on the same data folder).
    spill_dir: Path | None = None

    @field_validator("url")
    @classmethod
    def _sqlite_or_postgresql(cls, url: str | None) -> str | None:
        if not url:  # TOOLSCOUT_DB__URL= (empty) keeps the SQLite default, as leaving it out does
            return None
        try:
            backend = make_url(url).get_backend_name()
        except ArgumentError:
            raise ValueError(f"not a database URL (expected {SUPPORTED})") from None
        if backend not in ("sqlite", "postgresql"):
            raise ValueError(f"{backend!r} is not a database Toolscout runs on (expected {SUPPORTED})")
        return url
