"""The blocking API (re-exported by :mod:`starquake.client`): the asyncio core on one
background event-loop thread per client, and the blocking producer, consumer, reader and table
view around its handles."""
