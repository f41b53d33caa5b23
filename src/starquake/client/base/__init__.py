"""What every part of the client shares: the enumerations of the public API, message ids and
received messages, the settings of clients, producers and consumers, argument checks and the
policy classes built from them, authentication, and where the client logs.

Private: the public names are re-exported by :mod:`starquake.client`. Nothing here imports
another part of the client.
"""
