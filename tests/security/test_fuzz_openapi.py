"""Property-based fuzzing of the whole OpenAPI with schemathesis against a real `uvicorn` server: every route
(but the endless /events stream), valid and invalid inputs; no 5xx, and every answer documented: its status,
its content type and its body schema. Run with `pytest -m fuzz`; TOOLSCOUT_FUZZ_EXAMPLES sets the examples
per operation (default 25)."""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import schemathesis
import uvicorn
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from indexer.embedding import HashingEmbedder
from service.main import create_app
from tests.processes import free_port
from tests.security.conftest import TOOLS, make_settings

pytestmark = pytest.mark.fuzz
EXAMPLES = int(os.environ.get("TOOLSCOUT_FUZZ_EXAMPLES", "25"))
CASES: Counter[str] = Counter()
STATUSES: Counter[int] = Counter()
UNSATISFIABLE: list[str] = []
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


@pytest.fixture(scope="session")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The service (open mode on loopback, so every route is reachable as the local admin) on a free port."""
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    service_settings = make_settings(tmp, permissions=None, policy={"rate_limit_per_minute": 0})
    app = create_app(service_settings, embedder=HashingEmbedder())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the service did not start")
        time.sleep(0.05)
    httpx.post(f"http://127.0.0.1:{port}/tools", json={"tools": TOOLS}, timeout=60).raise_for_status()
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


def fuzz_operation(operation: schemathesis.APIOperation, mode: GenerationMode, failures: list[str]) -> None:
    """Run `EXAMPLES` generated cases of one operation; record the first failure of each kind."""

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.generate],
    )
    def run(case: schemathesis.Case) -> None:
        response = case.call(timeout=30)
        CASES[f"{case.method} {case.path}"] += 1
        STATUSES[response.status_code] += 1
        case.validate_response(response, checks=CHECKS)

    try:
        run()
    except Unsatisfiable:
        UNSATISFIABLE.append(f"{operation.label} ({mode.value})")  # e.g. no invalid input exists for GET /healthz
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # noqa: BLE001 - a failure group; collect every operation's, report them all
        failures.append(f"{operation.label} ({mode.value}): {str(exc)[:1500]}")


def test_every_route_answers_documented_4xx_never_5xx(api_url: str) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json").exclude(path="/events")
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 20
    for operation in operations:
        for mode in GenerationMode:
            fuzz_operation(operation, mode, failures)
    print(
        f"\nschemathesis: {sum(CASES.values())} cases over {len(CASES)} of {len(operations)} operations, "
        f"{len(failures)} failures; statuses {dict(sorted(STATUSES.items()))}; "
        f"{len(UNSATISFIABLE)} operation/mode pairs have no invalid input to generate"
    )
    assert not any(status >= 500 for status in STATUSES)
    assert not failures, "\n\n".join(failures)
