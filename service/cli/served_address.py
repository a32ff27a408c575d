"""Where the `toolscout serve` of a data folder listens, kept in that folder while it runs (`serve.url`).

The CLI reaches a service at TOOLSCOUT_FRONTEND__API_URL (http://127.0.0.1:8765). With the service on another port
(`scripts/serve.sh --port 8791`), `toolscout search` in its folder found nothing there, tried the folder itself,
whose index the service holds, and said so after 4-5 s in the embedded engine's words (`Can't init WAL:
Kind(WouldBlock)`). Now it says at once where that service listens. The CLI never sends its key there by itself: the
file may be a stale one's, and another program may hold that port since."""

from __future__ import annotations

import contextlib
import ipaddress
from pathlib import Path

import httpx

from service.settings import Settings

FILE_NAME = "serve.url"


def served_url(host: str, port: int) -> str:
    """The URL a client on this machine reaches a service bound to host:port at (every address: loopback)."""
    if host in ("", "0.0.0.0"):
        return f"http://127.0.0.1:{port}"
    if host in ("::", "[::]"):
        return f"http://[::1]:{port}"
    bare = host.strip("[]")
    try:
        ipv6 = ipaddress.ip_address(bare).version == 6
    except ValueError:
        ipv6 = False  # a host name, written as it is
    return f"http://[{bare}]:{port}" if ipv6 else f"http://{host}:{port}"


def write_served_url(data_dir: Path, host: str, port: int) -> None:
    """Say, in the data folder, where its service listens (best effort: an unwritable folder fails the start later,
    with its own message)."""
    with contextlib.suppress(OSError):
        (data_dir / FILE_NAME).write_text(served_url(host, port) + "\n")


def remove_served_url(data_dir: Path) -> None:
    (data_dir / FILE_NAME).unlink(missing_ok=True)


def other_service(settings: Settings) -> str | None:
    """The URL of this data folder's service when it answers there and is not the one the CLI was told of."""
    try:
        url = (settings.data_dir / FILE_NAME).read_text().strip()
    except OSError:
        return None
    if not url.startswith("http://") or url.rstrip("/") == settings.frontend.api_url.rstrip("/"):
        return None
    try:
        httpx.get(f"{url}/healthz", timeout=0.5).raise_for_status()
    except httpx.HTTPError:
        return None  # stale: that service is gone
    return url


def elsewhere_hint(settings: Settings, url: str) -> str:
    return (
        f"no service at {settings.frontend.api_url} (TOOLSCOUT_FRONTEND__API_URL), but the `toolscout serve` of "
        f"{settings.data_dir.resolve()} listens at {url}: set TOOLSCOUT_FRONTEND__API_URL={url}"
    )
