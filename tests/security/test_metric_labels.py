"""/metrics label sets stay bounded whatever a client sends, with or without a key."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.security.conftest import bearer, cli_key, make_settings, running

STANDARD = {"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"}


async def test_a_request_method_no_route_takes_is_one_label_value(tmp_path: Path) -> None:
    """The method of every request became a label value as sent: 2,000 keyless requests with methods M0..M1999
    (any token over h11; llhttp, uvicorn's default parser, lets some 40 WebDAV and other names through) added
    40,000 lines to /metrics and 9 MB to the service. Methods outside the standard ones now count as _OTHER."""
    async with running(make_settings(tmp_path)) as (app, http):
        admin = await cli_key(app, "root", ["admin"])
        for method in [f"M{i}" for i in range(30)] + ["PROPFIND", "MKCOL", "PURGE"]:
            assert (await http.request(method, "/search")).status_code in (401, 405)
            assert (await http.request(method, "/nowhere")).status_code in (401, 404, 405)
        await http.get("/tools")  # a standard method keeps its own value
        scraped = (await http.get("/metrics", headers=bearer(admin))).text
    methods = {
        sample.labels["method"]
        for family in text_string_to_metric_families(scraped)
        for sample in family.samples
        if "method" in sample.labels
    }
    assert "GET" in methods and "_OTHER" in methods
    assert methods <= STANDARD | {"_OTHER"}, methods - STANDARD
