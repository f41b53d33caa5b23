"""Producers: one partition's producer, partitioned producers and their routing, and messages
on their way to the broker (batches, what is kept of a message until its receipt)."""
