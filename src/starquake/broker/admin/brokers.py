"""The broker's own endpoints, with Pulsar's paths:

- ``GET /status.html``: ``OK`` (200) while the broker serves, for load balancers (no
  credentials needed);
- ``GET /admin/v2/brokers/health``: ``ok`` (200) once the broker has written a heartbeat to its
  metadata store (synced to disk) and read it back; 503 with the reason otherwise;
- ``GET /admin/v2/brokers/configuration``: the names of the settings that can change while the
  broker runs (none here: every setting is read at start-up);
- ``GET /admin/v2/brokers/configuration/values``: those settings' values (an empty object);
- ``GET /admin/v2/brokers/leaderBroker``: the leader broker, ``{"serviceUrl", "brokerId"}``
  (this one when standalone; 503 while a cluster has none);
- ``GET /admin/v2/brokers/configuration/runtime``: every setting as the broker was configured
  (defaults included), values as strings (secrets masked).

They come before the ``/admin/v2/brokers/{cluster}`` route, which would take
``health``, ``leaderBroker`` and ``configuration`` for cluster names.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from starquake.broker.admin.replies import Reply
from starquake.broker.admin.routing import Route
from starquake.broker.web import Call, Need, json_reply
from starquake.common.redact import redact_url

if TYPE_CHECKING:
    from starquake.broker.service import BrokerService

log = logging.getLogger(__name__)

HEARTBEAT_KEY = "/admin/heartbeat"
_SECRET = re.compile(r"secret|password|authParams|AuthenticationParameters", re.IGNORECASE)
MASK = "********"


def runtime_configuration(service: BrokerService) -> dict[str, str]:
    """Every setting of the running broker as text, with secrets masked."""
    config = service.config
    out: dict[str, str] = {}
    for field in dataclasses.fields(config):
        if field.name == "extra":
            continue
        value = getattr(config, field.name)
        text = str(value).lower() if isinstance(value, bool) else str(value)
        out[field.name] = MASK if text and _SECRET.search(field.name) else redact_url(text)
    for key, text in config.extra.items():
        out[key] = MASK if text and _SECRET.search(key) else redact_url(text)
    return dict(sorted(out.items()))


def _heartbeat(service: BrokerService) -> str | None:
    """Write a heartbeat to the metadata store and read it back; why it failed, or None."""
    stamp = str(time.time_ns()).encode()
    service.metadata.put_many([(HEARTBEAT_KEY, stamp)])
    if service.metadata.get(HEARTBEAT_KEY) != stamp:
        return "the metadata store did not return the heartbeat just written"
    return None


async def status(service: BrokerService, call: Call) -> Reply:
    """``OK`` while the broker serves (for load balancers)."""
    return 200, "text/plain", b"OK"


async def health(service: BrokerService, call: Call) -> Reply:
    """``ok`` once a heartbeat written to the metadata store reads back; 503 otherwise."""
    try:
        problem = await asyncio.to_thread(_heartbeat, service)
    except Exception as exc:
        problem = f"the metadata store failed: {exc}"
    if problem is not None:
        log.warning("health check failed: %s", problem)
        return json_reply(503, {"reason": problem})
    return 200, "text/plain", b"ok"


async def dynamic_names(service: BrokerService, call: Call) -> Reply:
    """The names of the settings that can change at run time (none)."""
    return json_reply(200, [])


async def dynamic_values(service: BrokerService, call: Call) -> Reply:
    """The values of the settings that can change at run time (none)."""
    return json_reply(200, {})


async def runtime(service: BrokerService, call: Call) -> Reply:
    """Every setting as the broker was configured, secrets masked."""
    return json_reply(200, runtime_configuration(service))


async def leader_broker(service: BrokerService, call: Call) -> Reply:
    """The leader broker (this one when standalone): ``{"serviceUrl", "brokerId"}``."""
    membership = service.placement.membership
    if membership is None:
        url = service.web_service_url
        return json_reply(200, {"serviceUrl": url, "brokerId": urlsplit(url).netloc})
    leader = await membership.election.leader()
    if leader is None:
        return json_reply(503, {"reason": "no leader broker has been elected yet"})
    url = leader.http_url or leader.http_url_tls
    return json_reply(200, {"serviceUrl": url, "brokerId": leader.broker_id})


_BROKERS = "/admin/v2/brokers"

ROUTES = [
    Route("GET", r"/status\.html", status, Need.NOTHING),
    Route("GET", f"{_BROKERS}/health", health, Need.SUPER_USER),
    Route("GET", f"{_BROKERS}/leaderBroker", leader_broker, Need.SUPER_USER),
    Route("GET", f"{_BROKERS}/configuration", dynamic_names, Need.SUPER_USER),
    Route("GET", f"{_BROKERS}/configuration/values", dynamic_values, Need.SUPER_USER),
    Route("GET", f"{_BROKERS}/configuration/runtime", runtime, Need.SUPER_USER),
]
"""The broker's own endpoints."""
