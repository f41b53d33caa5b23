"""The arguments of the public API, declared once and read by both front-ends, and the
handles of the asyncio API (the producer, consumer and reader that
:mod:`starquake.client.asyncio` returns)."""
