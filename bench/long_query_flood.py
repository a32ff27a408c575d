"""How much one key flooding POST /search with long queries slows down another caller's short searches.

Usage: python -m bench.long_query_flood [--runs 3] [--clients 8] [--seconds 20] [--chars-per-token N]
                                        [--models-dir DIR]
Before this change: from a checkout of it, `PYTHONPATH=. python <this file> --models-dir ...`.

Runs the service with uvicorn in a child process (the real MiniLM, the demo catalog, the default rate limits of
600 a minute and a burst of 60 per key), then for --seconds an attacker process keeps --clients connections of one
key sending unique 8,000-character searches (split into 8 parts each), waiting out Retry-After when refused, while
the victim (this process, another key) searches a unique short query every 0.1 s. Prints the victim's p50/p90 of
short searches, quiet and under the flood, and the attacker's answers, per run and the medians over --runs.
`--chars-per-token 0` charges every search one token, as before policy.search_chars_per_token."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench.argument_flood import create_key, free_port, start_service

LONG_TEXT = (
    "List the files in my project folder, then read the newest one and summarise it; finally send the summary "
    "to my team by email and remember who received it. After that check the weather in {n} cities, convert the "
    "prices to euros, book a meeting room for tomorrow and post the agenda to the channel. "
)


def long_query(n: int) -> str:
    return (LONG_TEXT.format(n=n) * 40)[:8000]


def environment(work: Path, models: Path, chars_per_token: int | None) -> dict[str, str]:
    env = os.environ | {
        "TOOLSCOUT_DATA_DIR": str(work / "data"),
        "TOOLSCOUT_EXECUTION__DEMO_SERVERS": "false",
        "TOOLSCOUT_LOG_LEVEL": "WARNING",
    }
    if chars_per_token is not None:  # else the service's own setting (a checkout from before it knows none)
        env["TOOLSCOUT_POLICY__SEARCH_CHARS_PER_TOKEN"] = str(chars_per_token)
    if models.is_dir():
        env["TOOLSCOUT_EMBEDDING__MODELS_DIR"] = str(models)
    return env


def percentiles(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return statistics.median(ordered) * 1000, ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000


async def victim(http: httpx.AsyncClient, key: dict[str, str], seconds: float, start: int) -> list[float]:
    """Latencies of unique short searches, one every 0.1 s."""
    found: list[float] = []
    deadline, n = time.monotonic() + seconds, start
    while time.monotonic() < deadline:
        n += 1
        began = time.perf_counter()
        response = await http.post("/search", json={"query": f"weather forecast for city number {n}"}, headers=key)
        found.append(time.perf_counter() - began)
        assert response.status_code == 200, response.text
        await asyncio.sleep(0.1)
    return found


async def attack(base: str, key: dict[str, str], clients: int, seconds: float) -> dict[str, int]:
    seen: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def one(client: int) -> None:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            n = client * 1_000_000
            while time.monotonic() < deadline:
                n += 1
                response = await http.post("/search", json={"query": long_query(n)}, headers=key)
                seen[str(response.status_code)] = seen.get(str(response.status_code), 0) + 1
                if response.status_code == 429:
                    await asyncio.sleep(
                        min(float(response.headers.get("retry-after", "1")), deadline - time.monotonic())
                    )

    await asyncio.gather(*(one(i) for i in range(clients)))
    return seen


def attacker_process(base: str, key: dict[str, str], clients: int, seconds: float, out: Any) -> None:
    out.put(asyncio.run(attack(base, key, clients, seconds)))


async def wait_ready(http: httpx.AsyncClient, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the service exited with code {process.returncode}")
        try:
            if (await http.get("/readyz")).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        await asyncio.sleep(0.5)
    raise RuntimeError("the service did not get ready in 300 s")


async def one_run(args: argparse.Namespace) -> tuple[tuple[float, float], tuple[float, float], dict[str, int]]:
    work = Path(tempfile.mkdtemp(prefix="toolscout-longflood-"))
    env = environment(work, args.models_dir, args.chars_per_token)
    keys = [{"Authorization": f"Bearer {create_key(env, name, 'admin')}"} for name in ("victim", "attacker")]
    port = free_port()
    process = start_service(env, port)
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            await wait_ready(http, process)
            await victim(http, keys[0], 2, 0)  # warm
            quiet = await victim(http, keys[0], min(args.seconds, 8), 10_000)
            results: Any = multiprocessing.Queue()
            attacker = multiprocessing.Process(
                target=attacker_process, args=(base, keys[1], args.clients, args.seconds + 1, results)
            )
            attacker.start()
            await asyncio.sleep(1)
            loud = await victim(http, keys[0], args.seconds, 20_000)
            seen = await asyncio.to_thread(results.get, True, 120)
            attacker.join(30)
        return percentiles(quiet), percentiles(loud), seen
    finally:
        process.terminate()
        process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--chars-per-token", type=int, default=None, help="policy.search_chars_per_token")
    parser.add_argument("--models-dir", type=Path, default=Path(".toolscout/models"), help="exported models")
    args = parser.parse_args()
    runs = []
    for i in range(args.runs):
        quiet, loud, seen = asyncio.run(one_run(args))
        runs.append((quiet, loud))
        print(
            f"run {i + 1}: victim quiet p50 {quiet[0]:.0f} / p90 {quiet[1]:.0f} ms; under the flood p50 {loud[0]:.0f}"
            f" / p90 {loud[1]:.0f} ms; attacker answers {seen}",
            flush=True,
        )
    median = [statistics.median(run[j][m] for run in runs) for j in (0, 1) for m in (0, 1)]
    charged = "as configured" if args.chars_per_token is None else args.chars_per_token
    print(
        f"chars per token {charged}, median of {args.runs} runs: victim quiet p50 {median[0]:.0f} / p90 "
        f"{median[1]:.0f} ms; under the flood p50 {median[2]:.0f} / p90 {median[3]:.0f} ms"
    )


if __name__ == "__main__":
    main()
