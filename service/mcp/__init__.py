"""The MCP front end: lazy, grouped, full and dynamic modes over stdio and streamable HTTP, over the REST API.

api.py       REST client (problem+json -> ApiError)
profiles.py  named scopes from the profiles file
render.py    what the model sees: meta-tools, catalog tools, result texts; token counting
sessions.py  per-session activation sets (bounded, idle expiry)
notify.py    tools/list_changed to handshake sessions and 2026 listen streams
server.py    Frontend: the MCP server of a mode, its caches and event following
serve.py     stdio and streamable-HTTP runners
bench.py     `toolscout bench tokens`
"""

from typing import Literal

Mode = Literal["lazy", "grouped", "full", "dynamic"]
MODES: tuple[Mode, ...] = ("lazy", "grouped", "full", "dynamic")
