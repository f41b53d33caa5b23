"""Talking to brokers: one TCP connection, the connection pool with the lookup service
(binary or HTTP), and failover between clusters."""
