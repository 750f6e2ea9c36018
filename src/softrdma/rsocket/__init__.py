"""softrdma.rsocket: librdmacm's rsockets over softrdma, wire-compatible
with librdmacm's (its rstream and rcopy talk to these and back), with the
``socket`` module's shape.

* ``protocol``: the wire values and codecs (immediates, connection data, SGEs);
* ``stream``: one connection's data path (buffers, credits, completions);
* ``api``: ``RSocket`` / ``rsocket()``, the socket-shaped calls;
* ``options``: setsockopt/getsockopt and the keepalive service;
* ``signal``: the descriptor ``fileno()`` gives and the progress thread;
* ``aio``: asyncio streams and transports over rsockets;
* ``accel``: TCP sockets that go over rsockets when the peer speaks them
  (``softrdma run --sockets``).
"""

from .api import RSocket, create_connection, rsocket
from .protocol import RDMA_INLINE, RDMA_IOMAPSIZE, RDMA_ROUTE, RDMA_RQSIZE, RDMA_SQSIZE, SOL_RDMA

__all__ = ["RSocket", "rsocket", "create_connection", "SOL_RDMA", "RDMA_SQSIZE", "RDMA_RQSIZE", "RDMA_INLINE",
           "RDMA_IOMAPSIZE", "RDMA_ROUTE"]
