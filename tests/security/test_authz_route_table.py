"""The route table of the web port, enumerated: every route is a named handler with what it
needs, reached by its own paths, and refused over real HTTP to a caller without credentials
(401) and to a role without the right (403), as its need says."""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from authz_setup import SUPER_USER, call, secured_broker

from starquake.broker.admin import ROUTES, Route
from starquake.broker.admin.routing import route_for
from starquake.broker.embedded import EmbeddedBroker
from starquake.broker.security.authentication import UNAUTHENTICATED_PATHS
from starquake.broker.security.web_authorization import rule_for
from starquake.broker.web import Need

GROUP = re.compile(r"\(\?P<(?P<name>\w+)>(?:[^()]|\([^()]*\))*\)")
# path parameters naming the resources of tenant acme (administered by acme-admin)
VALUES = {
    "domain": "persistent",
    "tenant": "acme",
    "namespace": "app",
    "topic": "t",
    "subscription": "s",
    "role": "app",
    "cluster": "standalone",
    "name": "app.js",
    "bundle": "0x00000000_0x40000000",
}
PUBLIC = {Need.NOTHING}
ANY_ROLE = {Need.NOTHING, Need.ANY_ROLE}


def sample_path(route: Route) -> str:
    """A path ``route`` serves, naming tenant acme's resources (numbers: 1)."""
    path = GROUP.sub(lambda m: VALUES.get(m["name"], "1"), route.path)
    path = path.replace("/?", "").replace("\\", "")
    assert re.fullmatch(route.path, path), (route.path, path)
    return path


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    data: Path = tmp_path_factory.mktemp("authz-routes") / "data"
    running = secured_broker(data)
    try:
        yield running
    finally:
        running.stop()


def test_every_route_is_a_named_handler_with_a_need() -> None:
    assert len(ROUTES) > 150
    for route in ROUTES:
        handler = route.handler
        func = handler.func if isinstance(handler, functools.partial) else handler
        module = sys.modules[func.__module__]
        assert module.__name__.startswith("starquake.broker.admin."), route
        assert getattr(module, func.__name__) is func, f"{route.name} is not found by its name"
        assert isinstance(route.need, Need), route
        assert route.method in {"GET", "PUT", "POST", "DELETE"}, route
    keys = [(route.method, route.path) for route in ROUTES]
    assert len(set(keys)) == len(keys), "a route is in the table twice"


def test_every_route_is_reached_by_its_paths_and_authorized_by_its_need() -> None:
    for route in ROUTES:
        path = sample_path(route)
        assert route_for(ROUTES, route.method, path)[0] is route, f"{route.name} is shadowed"
        assert rule_for(route.method, path)[0] is route.need


def test_the_public_routes_are_the_paths_served_without_credentials() -> None:
    for route in ROUTES:
        public = UNAUTHENTICATED_PATHS.fullmatch(sample_path(route)) is not None
        assert public == (route.need is Need.NOTHING), route.name


def test_every_route_refuses_a_caller_without_credentials(broker: EmbeddedBroker) -> None:
    for route in ROUTES:
        status, reply = call(broker, route.method, sample_path(route))
        if route.need in PUBLIC:
            assert status not in (401, 403), (route.name, status, reply)
        else:
            assert status == 401, (route.name, status, reply)
            assert reply["reason"], route.name


@pytest.mark.parametrize("role", ["nobody", "other-admin"])
def test_every_route_refuses_a_role_without_its_need(broker: EmbeddedBroker, role: str) -> None:
    """A role granted nothing, and the admin of another tenant, are refused every route but
    the public ones and the dashboard's summary, with a reason."""
    for route in ROUTES:
        status, reply = call(broker, route.method, sample_path(route), role)
        if route.need in ANY_ROLE:
            assert status not in (401, 403), (route.name, status, reply)
        else:
            assert status == 403, (route.name, status, reply)
            assert reply["reason"], route.name


def test_a_tenant_admin_and_a_super_user_pass_every_read(broker: EmbeddedBroker) -> None:
    """Reads (GET) are let through to the handler for acme's admin on every route that does not
    need a super user, and for a super user on every route."""
    for role in ("acme-admin", SUPER_USER):
        for route in ROUTES:
            if route.method != "GET" or (role != SUPER_USER and route.need is Need.SUPER_USER):
                continue
            status, reply = call(broker, route.method, sample_path(route), role)
            assert status not in (401, 403), (role, route.name, status, reply)
