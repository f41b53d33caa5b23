"""The dashboard with authentication and authorization on: its page and files load without
credentials, its summary needs them and shows only what the role may read, and in Chromium the
operator signs in with a token (sent as ``Authorization: Bearer``) or a user and password
(``Basic``)."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from auth_support import BASIC_PROVIDER, HASHES, htpasswd
from authz_setup import SECRET, SUPER_USER, TOKEN_PROVIDER, call, token
from dashboard_browser import LivePage, find_chromium

from starquake.broker.embedded import EmbeddedBroker

TENANTS = {"acme": "acme-admin", "other": "other-admin"}
BASIC_USER, BASIC_PASSWORD = "operator", "s3cret:with colon"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedBroker]:
    directory: Path = tmp_path_factory.mktemp("dashboard-auth")
    conf = htpasswd(directory / "htpasswd", {BASIC_USER: HASHES["bcrypt"](BASIC_PASSWORD)})
    running = EmbeddedBroker(
        directory / "data",
        authenticationEnabled=True,
        authenticationProviders=f"{TOKEN_PROVIDER},{BASIC_PROVIDER}",
        tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        basicAuthConf=f"file://{conf}",
        authorizationEnabled=True,
        superUserRoles=SUPER_USER,
    ).start()
    try:
        for tenant, admin in TENANTS.items():
            info = {"adminRoles": [admin], "allowedClusters": ["standalone"]}
            assert call(running, "PUT", f"/admin/v2/tenants/{tenant}", SUPER_USER, info)[0] == 204
            namespace = f"/admin/v2/namespaces/{tenant}/ns"
            assert call(running, "PUT", namespace, SUPER_USER)[0] == 204
            topic = f"/admin/v2/persistent/{tenant}/ns/{tenant}-topic"
            assert call(running, "PUT", topic, admin)[0] == 204
        grant = "/admin/v2/namespaces/other/ns/permissions/reader"
        assert call(running, "POST", grant, "other-admin", ["consume"])[0] == 204
        yield running
    finally:
        running.stop()


@pytest.fixture
def page(tmp_path: Path) -> Iterator[LivePage]:
    live = LivePage(find_chromium(), tmp_path / "profile")
    try:
        yield live
    finally:
        live.close()


def _visible(reply: dict[str, Any]) -> dict[str, list[str]]:
    """Namespace names -> topic names of an overview answer."""
    return {
        ns["name"]: [t["name"] for t in ns["topics"]]
        for tenant in reply["tenants"]
        for ns in tenant["namespaces"]
    }


def test_page_needs_no_credentials_and_the_summary_shows_what_the_role_may_read(
    broker: EmbeddedBroker,
) -> None:
    for path in ("/", "/dashboard/dashboard.js", "/dashboard/dashboard-lib.js"):
        status, _ = call(broker, "GET", path)
        assert status == 200, path
    assert call(broker, "GET", "/dashboard/api/overview")[0] == 401
    assert call(broker, "GET", "/admin/v2/persistent/acme/ns/acme-topic/stats")[0] == 401

    status, reply = call(broker, "GET", "/dashboard/api/overview", "acme-admin")
    assert status == 200 and reply["role"] == "acme-admin"
    assert _visible(reply) == {"acme/ns": ["persistent://acme/ns/acme-topic"]}
    status, reply = call(broker, "GET", "/dashboard/api/overview", "reader")
    assert status == 200
    assert _visible(reply) == {"other/ns": ["persistent://other/ns/other-topic"]}
    status, reply = call(broker, "GET", "/dashboard/api/overview", "nobody")
    assert status == 200 and reply["tenants"] == []
    status, reply = call(broker, "GET", "/dashboard/api/overview", SUPER_USER)
    # with authorization on, the broker leaves public/default to a super user, as Pulsar does
    assert {"acme/ns", "other/ns"} <= set(_visible(reply))
    status, reply = call(broker, "GET", "/dashboard/api/overview?tenant=other", SUPER_USER)
    assert set(_visible(reply)) == {"other/ns"}


def _sign_in(page: LivePage, scheme: str, **fields: str) -> None:
    """Fill the sign-in form as an operator would, and submit it."""
    page.wait_for("!document.getElementById('auth-panel').hidden", "the sign-in form")
    script = [f"document.querySelector('input[name=scheme][value={scheme}]').click();"]
    for name, value in fields.items():
        script.append(f"document.getElementById('auth-{name}').value = {json.dumps(value)};")
    script.append("document.getElementById('auth-save').click(); true")
    page.evaluate("\n".join(script))


def test_operator_signs_in_with_a_token(
    broker: EmbeddedBroker, page: LivePage, tmp_path: Path
) -> None:
    base = broker.web_service_url
    page.goto(f"{base}/")
    page.wait_for("document.querySelector('[data-error]')?.dataset.error === '401'", "a 401")
    assert page.evaluate("document.getElementById('status').textContent") == "sign in needed"
    assert page.evaluate("document.getElementById('auth-button').hidden") is False

    page.watch_requests()
    acme = token("acme-admin")
    _sign_in(page, "bearer", token=acme)
    page.wait_refreshes(1)
    dom = page.dom()
    main = dom.find("main", data_view="overview")
    assert [s.attrs["data-tenant"] for s in main.find_all("section", cls="tenant")] == ["acme"]
    assert main.find("tr", data_topic="persistent://acme/ns/acme-topic")
    assert dom.find(id="auth-button").text == "Signed in as acme-admin"
    assert dom.find(id="auth-panel").attrs.get("hidden") is not None
    stored = json.loads(page.evaluate("sessionStorage.getItem('starquake.dashboard.auth')"))
    assert stored == {"scheme": "bearer", "secret": acme}
    api = [r for r in page.requests if "/dashboard/api/" in r["url"]]
    assert api and all(r["headers"].get("Authorization") == f"Bearer {acme}" for r in api)
    page.screenshot(tmp_path / "signed-in.png")

    # a topic of the tenant: its stats, with the same token; another tenant's is refused
    page.goto(f"{base}/#/topic/persistent/acme/ns/acme-topic")
    page.wait_refreshes(1)
    assert page.dom().find("main", data_view="topic").find("h1").text == "acme-topic"
    page.goto(f"{base}/#/topic/persistent/other/ns/other-topic")
    page.wait_for("document.querySelector('[data-error]')?.dataset.error === '403'", "a 403")

    # forgetting the token: back to asking for one
    page.goto(f"{base}/")
    page.wait_refreshes(1)
    page.evaluate("document.getElementById('auth-forget').click(); true")
    page.wait_for("document.querySelector('[data-error]')?.dataset.error === '401'", "a 401")
    assert page.evaluate("sessionStorage.getItem('starquake.dashboard.auth')") is None


def test_operator_signs_in_with_user_and_password(broker: EmbeddedBroker, page: LivePage) -> None:
    page.goto(f"{broker.web_service_url}/#/namespace/public/default")
    page.watch_requests()
    _sign_in(page, "basic", user=BASIC_USER, password=BASIC_PASSWORD)
    page.wait_refreshes(1)
    # the operator is no super user and administers no tenant: nothing to read
    assert page.dom().find(id="auth-button").text == f"Signed in as {BASIC_USER}"
    assert (
        page.dom().find("p", cls="empty").text == f"Nothing here that role {BASIC_USER} may read."
    )
    expected = "Basic " + base64.b64encode(f"{BASIC_USER}:{BASIC_PASSWORD}".encode()).decode()
    api = [r for r in page.requests if "/dashboard/api/" in r["url"]]
    assert api and all(r["headers"].get("Authorization") == expected for r in api)


def test_wrong_token_is_refused_and_asked_again(broker: EmbeddedBroker, page: LivePage) -> None:
    page.goto(f"{broker.web_service_url}/")
    _sign_in(page, "bearer", token=f"not-a-token-{uuid.uuid4().hex}")
    page.wait_for(
        "document.getElementById('auth-note').textContent.startsWith('The broker refused')",
        "the refusal",
    )
    assert page.evaluate("!document.getElementById('auth-panel').hidden")
