"""The generated protobuf classes of the wire protocol, re-exported as ``pb``.

Code outside ``starquake.protocol`` imports them from here (``from starquake.protocol.wire
import pb``) rather than from the generated package, whose layout is an implementation detail.
"""

from __future__ import annotations

from starquake.protocol._generated import starquake_wire_pb2 as pb

__all__ = ["pb"]
