"""A read-only dashboard on the web port: ``GET /`` serves one HTML page and
``GET /dashboard/{file}`` its script and style sheet.

The page's script polls the broker every two seconds and draws what it gets: the overview
from one summary request (:mod:`~starquake.broker.admin.dashboard_api`), a topic from its stats
in the admin API (a partitioned topic's per partition). It sends the operator's credentials
when given some. The files ship in the package (``static/``) and are read with
:mod:`importlib.resources` on first use, then kept in memory.
"""

from __future__ import annotations

import importlib.resources
from typing import TYPE_CHECKING

from starquake.broker.admin import dashboard_api
from starquake.broker.admin.replies import Reply
from starquake.broker.web import WebServer, json_reply

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

INDEX = "index.html"
ASSET = r"/dashboard/(?P<name>[A-Za-z0-9_.-]+)"
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


class StaticFiles:
    """The files of ``static/`` by name, read once; only names with a known type are served."""

    def __init__(self) -> None:
        self._cache: dict[str, bytes] = {}

    def get(self, name: str) -> Reply | None:
        """The reply serving a file of the dashboard; None for an unknown or hidden one."""
        suffix = name[name.rfind(".") :] if "." in name else ""
        ctype = CONTENT_TYPES.get(suffix)
        if ctype is None or name.startswith("."):
            return None
        data = self._cache.get(name)
        if data is None:
            resource = importlib.resources.files(__name__.rpartition(".")[0]) / "static" / name
            if not resource.is_file():
                return None
            data = resource.read_bytes()
            self._cache[name] = data
        return 200, ctype, data


def install(web: WebServer, service: BrokerService) -> None:
    """Add the dashboard's page, its assets and its summary to ``web``."""
    files = StaticFiles()
    dashboard_api.install(web, service)

    def not_found(path: str) -> Reply:
        return json_reply(404, {"reason": f"No route for GET {path}"})

    async def index(_method: str, _target: str, _body: bytes) -> Reply:
        return files.get(INDEX) or not_found("/")

    async def asset(params: dict[str, str], _body: bytes) -> Reply:
        name = params["name"]
        return files.get(name) or not_found(f"/dashboard/{name}")

    web.route("GET", "/", index)
    web.route_pattern("GET", ASSET, asset)
