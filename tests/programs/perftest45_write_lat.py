"""softrdma's ib_write_lat ending as perftest 4.5's does with -R: no
closing key exchange after the results; destroy_ctx at once, whose
rdma_cm_disconnect_nodes disconnects the test QP on *both* sides and waits
for DISCONNECTED (then the exchange's ID goes, another DREQ).  The peer
that still does the closing exchange meets a peer that disconnects first.

    perftest45_write_lat.py [ib_write_lat options ...]
"""

from __future__ import annotations

import sys
import time

from softrdma.tools import perftest
from softrdma.tools.perftest import flows, rdma_cm


def _no_close_connection(self, lenient: bool = False) -> bool:
    return True                     # write_lat.c 4.5: no ctx_close_connection


def _disconnect_nodes_45(t) -> None:
    from softrdma.pyverbs.cmid import CMEvent
    from softrdma.pyverbs.librdmacm_enums import RDMA_CM_EVENT_DISCONNECTED
    from softrdma.pyverbs.pyverbs_error import PyverbsError
    cma = t.cma
    if cma is None or cma.cm_id is None or not cma.connected:
        return
    cma.connected = False
    cma.cm_id.disconnect()
    end = time.monotonic() + 120    # the DREQ's own retries end well before
    while time.monotonic() < end:
        try:
            ev = CMEvent(cma.channel, timeout=end - time.monotonic())
        except PyverbsError:
            return
        typ = ev.event_type
        ev.ack_cm_event()
        if typ == RDMA_CM_EVENT_DISCONNECTED:
            return


flows.Test.close_connection = _no_close_connection
rdma_cm.disconnect_nodes = _disconnect_nodes_45
sys.exit(perftest.main(sys.argv[1:], prog="ib_write_lat"))
