"""The broker: Pulsar's binary protocol and admin REST API over Starquake's storage.

Where things go:

- **A wire command** is routed by ``ServerCnx._handler_table`` in ``connection.py`` to its
  handler: ``producer_commands.py`` (PRODUCER, SEND, CLOSE_PRODUCER), ``consumer_commands.py``
  (SUBSCRIBE, FLOW, ACK, SEEK, ...), ``topic_commands.py`` (LOOKUP, partitions, topic lists,
  schemas), ``security/cnx_auth.py`` (CONNECT, AUTH_RESPONSE). Handlers see the connection as
  ``cnx_base.CommandContext`` and topics as ``topic_api.TopicApi``; they never touch the
  transport.
- **A policy** is resolved (topic, then namespace, then ``broker.conf``) by a function in
  ``applied_policies.py``, which its users call on each check. A value cached on a live topic
  or dispatcher is refreshed on a policy change in ``policy_events.py``. The admin endpoints
  that store it: ``admin/policies.py`` (namespace) and ``admin/topic_policies.py`` (topic).
- **An admin endpoint** goes into the module of its resource in ``admin/`` (tenants,
  namespaces' policies, topics, subscriptions, schemas, ...), which lists its routes;
  ``admin/__init__.py`` installs every module. Plain-Python operations behind the topic
  endpoints live in ``topic_admin.py``.
- **A config key** is a field of ``BrokerConfig`` in ``config.py``, named, typed and defaulted
  as in Pulsar's ``broker.conf``. A Pulsar security key Starquake does not implement is
  listed in ``pulsar_settings.py`` instead (refused, or accepted with no effect).

``service.py``'s ``BrokerService`` assembles the broker: the topic registry, storage and
background loops. Topics, subscriptions, dispatchers, compaction and policies receive narrow
views of it (Protocols in ``contexts.py`` and next to their users), never the service
itself; no module imports another in a circle, type-only imports included.
"""
