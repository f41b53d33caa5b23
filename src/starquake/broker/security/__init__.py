"""Security of the broker: TLS contexts, authentication providers and authorization.

- ``tls``: the SSL contexts of the TLS binary and web ports, from Pulsar's ``tls*`` keys.
- ``authentication``: providers (token, basic, TLS certificate) that turn a client's
  credentials into a role, for CONNECT on the binary port and for every web request.
- ``authorization``: who may do what: super-users, tenant admins, and the ``produce`` /
  ``consume`` / ... permissions granted on namespaces and topics.
"""
