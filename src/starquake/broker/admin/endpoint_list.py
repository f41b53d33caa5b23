"""The list of the web port's endpoints in Markdown, generated from the route table.

``python -m starquake.broker.admin.endpoint_list > docs/admin-endpoints.md`` writes it (the
script ``scripts/gen-endpoints`` does); a test checks the file is up to date.
"""

from __future__ import annotations

import functools
import inspect
import sys
from collections.abc import Iterable

from starquake.broker.admin import ROUTES
from starquake.broker.admin.routing import Route
from starquake.broker.web import Need

__all__ = ["render"]

_NEEDS = {
    Need.NOTHING: "nothing (public)",
    Need.ANY_ROLE: "any authenticated role",
    Need.SUPER_USER: "a super user",
    Need.TENANT_ADMIN: "an admin of the tenant",
    Need.LIST_TOPICS: "an admin of the tenant, or `consume` on the namespace",
    Need.TOPIC_LOOKUP: "an admin of the tenant, or `produce` or `consume` on the topic",
    Need.TOPIC_CONSUME: "an admin of the tenant, or `consume` on the topic (and subscription)",
    Need.TOPIC_ADMIN: "an admin of the tenant",
}

_HEAD = """# Endpoints of the web port

Generated from the route table (`starquake.broker.admin.ROUTES`) by `scripts/gen-endpoints`;
do not edit by hand. The routes are matched in this order, the first match wins. With
`authorizationEnabled`, *Needs* is what the caller's role must have (a super user may call
every endpoint): without credentials a request is answered 401, a role without the right 403.
A malformed body or parameter is answered 400 with a reason naming it.
"""


def _what(route: Route) -> str:
    """The first sentence of the handler's docstring, on one line."""
    handler = route.handler
    func = handler.func if isinstance(handler, functools.partial) else handler
    paragraph = (inspect.getdoc(func) or "").split("\n\n")[0]
    return " ".join(paragraph.split()).replace("|", "\\|")


def _row(route: Route) -> str:
    cells = [route.method, f"`{route.template}`", route.need.value, route.body, _what(route)]
    return "| " + " | ".join([*cells, f"`{route.name}`"]) + " |"


def render(routes: Iterable[Route] = ROUTES) -> str:
    """The Markdown list of ``routes``: a table per module, in table order."""
    out = [_HEAD + "\nWhat each *Needs* means:\n"]
    out += [f"- **{need.value}**: {text}" for need, text in _NEEDS.items()]
    module = None
    for route in routes:
        name = route.name.partition(".")[0]
        if name != module:
            module = name
            out += [
                "",
                f"## {name}",
                "",
                "| Method | Path | Needs | Body | What | Handler |",
                "| --- | --- | --- | --- | --- | --- |",
            ]
        out.append(_row(route))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
