"""Topic compaction (Pulsar's compacted topics): for each key only its latest message.

``selection`` decides what a compacted view keeps, ``entries`` parses and rewrites stored
entries, ``compactor`` runs one compaction, ``view`` and ``reading`` serve the view to
``read_compacted`` consumers, ``state`` is a topic's compaction state and ``service`` ties it
to the broker (triggers, status, the threshold monitor, topic load and deletion).
"""
