"""What producers and consumers are built on: the client's shared state (``ClientCore``), the
reconnecting base of every producer and consumer, the receiver queue (and its interruptible
blocking waits), chunked messages (cut and put together again) and the watcher of partitioned
topics."""
