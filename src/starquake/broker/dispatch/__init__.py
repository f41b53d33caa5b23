"""Dispatchers: how a subscription hands entries to its consumers."""
