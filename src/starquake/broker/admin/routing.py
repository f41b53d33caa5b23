"""The route record of the broker's web endpoints.

Each resource module of this package lists its endpoints in one ``ROUTES`` table of
:class:`Route` records: the method, the path (a regular expression whose named groups are the
path's parameters), the handler (a module-level function taking the broker service and the
:class:`~starquake.broker.web.Call`) and what the caller's role needs
(:class:`~starquake.broker.web.Need`). The package's combined table is what the web server
installs, what the authorization of web requests reads, and what the list of endpoints in
``docs/admin-endpoints.md`` is generated from.
"""

from __future__ import annotations

import asyncio
import functools
import re
import weakref
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starquake.broker.admin.replies import guarded
from starquake.broker.errors import TopicNotServedError
from starquake.broker.web import Call, Endpoint, Need, Reply, WebServer

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

__all__ = ["Handler", "Route", "install_routes", "lock_of", "route_for"]

Handler = Callable[["BrokerService", Call], Awaitable[Reply]]
"""An endpoint's handler: the broker service and the routed request -> the reply."""


_GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?:[^()]|\([^()]*\))*\)")


@dataclass(frozen=True)
class Route:
    """One endpoint: ``method`` on the paths ``path`` matches, served by ``handler`` for a
    role that has what ``need`` says."""

    method: str
    path: str
    handler: Handler
    need: Need
    body: str = ""
    """What the request's JSON body holds (empty: the endpoint reads no body)."""

    @property
    def name(self) -> str:
        """The handler's module and name (``permissions.grant_namespace``)."""
        handler = self.handler
        if isinstance(handler, functools.partial):
            handler = handler.func
        module = handler.__module__.rpartition(".")[2]
        return f"{module}.{handler.__name__}"

    @property
    def template(self) -> str:
        """The path with ``{name}`` for each parameter, as the docs write it."""
        readable = _GROUP.sub(lambda m: "{" + m["name"] + "}", self.path)
        return readable.replace("/?", "[/]").replace("\\.", ".")

    @property
    def parameters(self) -> list[str]:
        """The names of the path's parameters, in order."""
        return list(re.compile(self.path).groupindex)


def route_for(routes: Iterable[Route], method: str, path: str) -> tuple[Route, dict[str, str]]:
    """The first of ``routes`` serving ``method path`` and the path's parameters (LookupError
    when none does)."""
    for route in routes:
        if route.method == method:
            found = re.fullmatch(route.path, path)
            if found is not None:
                return route, {k: v for k, v in found.groupdict().items() if v is not None}
    raise LookupError(f"no route for {method} {path}")


def _bind(handler: Handler, service: BrokerService) -> Endpoint:
    async def endpoint(call: Call) -> Reply:
        try:
            return await handler(service, call)
        except TopicNotServedError as exc:
            # another broker of the cluster serves the topic: send the request there (307,
            # as Pulsar does); none yet: this broker takes the bundle and serves it
            owner = await service.placement.owner(exc.topic, False)
            if owner is None:
                return await handler(service, call)
            location = (owner.http_url or owner.http_url_tls) + call.target
            return 307, "application/json", b"", {"Location": location}

    return guarded(endpoint)


def install_routes(web: WebServer, service: BrokerService, routes: Iterable[Route]) -> None:
    """Serve ``routes`` on ``web`` for ``service``, failures answered as Pulsar does."""
    for route in routes:
        web.add_route(route.method, route.path, _bind(route.handler, service), route.need)


_LOCKS: weakref.WeakKeyDictionary[BrokerService, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def lock_of(service: BrokerService, name: str) -> asyncio.Lock:
    """The lock named ``name`` of ``service`` (one read-modify-write of stored policies at a
    time), created on first use."""
    locks = _LOCKS.setdefault(service, {})
    lock = locks.get(name)
    if lock is None:
        lock = locks[name] = asyncio.Lock()
    return lock
