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

from starquake.broker.admin.replies import Reply
from starquake.broker.admin.routing import Route
from starquake.broker.web import Call, Need, json_reply

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


_FILES = StaticFiles()


def _not_found(path: str) -> Reply:
    return json_reply(404, {"reason": f"No route for GET {path}"})


async def index(service: BrokerService, call: Call) -> Reply:
    """The dashboard's page."""
    return _FILES.get(INDEX) or _not_found("/")


async def asset(service: BrokerService, call: Call) -> Reply:
    """A script or style sheet of the page."""
    name = call.params["name"]
    return _FILES.get(name) or _not_found(f"/dashboard/{name}")


ROUTES = [
    Route("GET", "/", index, Need.NOTHING),
    Route("GET", ASSET, asset, Need.NOTHING),
]
"""The dashboard's page and its files."""
