"""`toolscout index` through a running service: the catalog registered a part at a time (POST /tools), each part
under the service's limits whatever its tools hold, the refusals of every part named by their place in the file."""

from __future__ import annotations

import json
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import httpx

INDEX_PART = 1000  # tools per POST /tools: well under the service's registration limit (policy, 5,000)
# JSON bytes per POST /tools, under the service's body limit (policy.max_body_bytes, 20 MB by default): 1,000 tools of
# 16,000 Chinese characters each were a 48 MB part, a 413 that stopped the command after the parts before it had
# registered. A part the service still refuses as too large (a lower limit) is sent again in halves.
PART_BYTES = 4_000_000
_PART_POINTER = re.compile(r"^/body/tools/(\d+)")
# A part's body costs rate-limit tokens by its size (policy.body_kib_per_token): a 429 is waited out (its
# Retry-After, at most this long) and the part sent again.
MOST_RATE_WAIT_SECONDS = 60.0


def _parts(tools: list[Any]) -> Iterator[tuple[int, list[Any]]]:
    """(index of its first tool, tools) of each part: INDEX_PART tools, or fewer past PART_BYTES."""
    start, size, part = 0, 0, []
    for tool in tools:
        length = len(json.dumps(tool, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
        if part and (len(part) == INDEX_PART or size + length > PART_BYTES):
            yield start, part
            start, size, part = start + len(part), 0, []
        part.append(tool)
        size += length
    yield start, part


def _rebased(items: list[dict[str, Any]], start: int) -> list[dict[str, Any]]:
    """A part's errors and warnings as places in the whole catalog: a part's /body/tools/3 is the file's tool
    start + 3 (the second part's refusals named the first part's tools)."""
    for item in items:
        if isinstance(item.get("index"), int):
            item["index"] += start
        if isinstance(item.get("pointer"), str):
            item["pointer"] = _PART_POINTER.sub(lambda m: f"/body/tools/{int(m[1]) + start}", item["pointer"])
    return items


def _retry_after(response: httpx.Response) -> float | None:
    """The seconds a 429 says to wait, None when it says none or more than MOST_RATE_WAIT_SECONDS."""
    try:
        wait = float(response.headers.get("retry-after", ""))
    except ValueError:
        return None
    return wait if 0 <= wait <= MOST_RATE_WAIT_SECONDS else None


def post_in_parts(
    client: httpx.Client,
    tools: list[Any],
    servers: dict[str, Any] | None,
    progress: Callable[[int, int], None] | None,
    fail: Callable[[dict[str, Any]], int],
) -> dict[str, Any] | int:
    """Register tools with the running service a part at a time: the summed report, or an exit code on a refusal.
    `progress(done, total)` after each part."""
    total: dict[str, Any] = {
        "created": 0, "updated": 0, "unchanged": 0, "removed": 0, "tools": [], "errors": [], "held": [], "warnings": []
    }
    queue, done = deque(_parts(tools)), 0
    while queue:
        start, tools_part = queue.popleft()
        response = client.post("/tools", json={"tools": tools_part, **({"servers": servers} if servers else {})})
        body = response.json()
        if response.status_code == 429 and (wait := _retry_after(response)) is not None:
            time.sleep(wait)
            queue.appendleft((start, tools_part))
            continue
        if response.status_code == 413 and len(tools_part) > 1:
            half = len(tools_part) // 2
            queue.extendleft([(start + half, tools_part[half:]), (start, tools_part[:half])])
            continue
        if response.status_code == 413:  # one tool larger than the service takes: refused, the others go on
            name = tools_part[0].get("name") if isinstance(tools_part[0], dict) else None
            reason = body.get("detail", "larger than the service's request limit")
            total["errors"].append({"index": start, "tool": str(name), "pointer": f"/body/tools/{start}",
                                    "field": "", "reason": reason, "kind": "invalid"})
        elif response.status_code == 422 and body.get("errors"):
            total["errors"] += _rebased(body["errors"], start)  # every tool of this part was refused: report them
        elif response.status_code >= 400:
            return fail(body)
        else:
            for key in ("created", "updated", "unchanged", "removed"):
                total[key] += body[key]
            total["tools"] += body["tools"]
            total["errors"] += _rebased(body["errors"], start)
            total["held"] += body.get("held", [])
            total["warnings"] += _rebased(body.get("warnings", []), start)
        done += len(tools_part)
        if progress is not None:
            progress(done, len(tools))
    return total
