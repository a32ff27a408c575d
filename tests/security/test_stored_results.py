"""Results cut to the token budget are stored for result_ttl_hours: one caller must not fill the database with
them (a script's return value is up to a MB, an upstream result up to execution.max_message_bytes)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from sqlalchemy import func, select

from service.db.models import StoredResult, utcnow
from tests.security.conftest import assert_problem, bearer, cli_key, opened_world

SCRIPT = {"script": "return 'word '.repeat(50000)"}  # 250 KB, cut to the budget and stored


async def test_a_caller_keeps_at_most_its_quota_of_stored_results_the_oldest_leave_first(tmp_path: Path) -> None:
    """Measured before: 60 runs of a dev key returning 1 MB each stored 60 MB in 6.9 s (519 MB a minute; the rate
    limit allows 600 MB a minute, 864 GB before the 24 h purge), every one kept."""
    async with opened_world(tmp_path, execution={"max_stored_results_per_caller": 3}) as world:
        app, http, dev = world["app"], world["http"], world["dev"]
        other = await cli_key(app, "other-agent", ["dev"])
        theirs = (await http.post("/run", json=SCRIPT, headers=bearer(other))).json()["result"]["result_id"]
        ids = []
        for _ in range(5):
            ran = await http.post("/run", json=SCRIPT, headers=bearer(dev))
            assert ran.status_code == 200, ran.text
            ids.append(ran.json()["result"]["result_id"])
        async with app.state.resources.session() as session:
            rows = dict(
                (await session.execute(select(StoredResult.caller, func.count()).group_by(StoredResult.caller))).all()
            )
        assert rows == {"dev-agent": 3, "other-agent": 1}
        for gone in ids[:2]:
            assert_problem(await http.get(f"/results/{gone}", headers=bearer(dev)), 404, "not-found")
        for kept in ids[2:]:
            assert (await http.get(f"/results/{kept}", headers=bearer(dev))).status_code == 200
        assert (await http.get(f"/results/{theirs}", headers=bearer(other))).status_code == 200


async def test_a_stored_result_past_its_ttl_is_gone_before_the_purge_deletes_it(tmp_path: Path) -> None:
    """The purge runs every 10 minutes: a result past result_ttl_hours was readable until then."""
    async with opened_world(tmp_path) as world:
        app, http, dev = world["app"], world["http"], world["dev"]
        result_id = (await http.post("/run", json=SCRIPT, headers=bearer(dev))).json()["result"]["result_id"]
        assert (await http.get(f"/results/{result_id}", headers=bearer(dev))).status_code == 200
        ttl = app.state.resources.settings.execution.result_ttl_hours
        async with app.state.resources.session() as session:
            row = await session.get(StoredResult, result_id)
            row.created_at = utcnow() - timedelta(hours=ttl, seconds=5)
            await session.commit()
        assert_problem(await http.get(f"/results/{result_id}", headers=bearer(dev)), 404, "not-found")
