"""Every page served on the API's origin is trusted by the console: a script on any of them may call
/console/api with the signed-in session (same origin, the console's header). So no page here runs code from
elsewhere unless the operator asks for it: FastAPI's /docs and /redoc load Swagger UI and ReDoc from a CDN at a
floating version, and are off by default (`TOOLSCOUT_DOCS_UI=true` serves them); the OpenAPI document stays."""

from __future__ import annotations

from pathlib import Path

from tests.security.conftest import assert_problem, make_settings, running


async def test_no_page_of_the_origin_loads_third_party_scripts_unless_asked(tmp_path: Path) -> None:
    async with running(make_settings(tmp_path)) as (_app, http):
        for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
            assert_problem(await http.get(path), 404, "not-found")
        assert (await http.get("/openapi.json")).json()["info"]["title"] == "Toolscout"
        console = await http.get("/console")
        assert "script-src 'self'" in console.headers["content-security-policy"]
    settings = make_settings(tmp_path)
    settings.docs_ui = True
    async with running(settings) as (_app, http):
        assert "swagger-ui" in (await http.get("/docs")).text
        assert (await http.get("/redoc")).status_code == 200
