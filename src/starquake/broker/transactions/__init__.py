"""Pulsar transactions: the transaction coordinators, their logs and the topics' buffers.

- :mod:`.state`: a coordinator's transactions and the log records that change them (pure).
- :mod:`.coordinator`: one coordinator, serving NEW_TXN, ADD_PARTITION_TO_TXN, END_TXN...
- :mod:`.buffer`: a topic's transaction buffer (what its open and aborted transactions hide).
- :mod:`.service`: the coordinators of this broker, started with it when
  ``transactionCoordinatorEnabled`` is on.
- :mod:`.commands`: the connection's handlers of the transaction commands.
"""
