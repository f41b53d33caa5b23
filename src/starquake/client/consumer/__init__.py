"""Consumers: one partition's consumer, consumers of many topics or a pattern, acknowledgments,
redelivery timing, dead letters, schema decoding, and table views."""
