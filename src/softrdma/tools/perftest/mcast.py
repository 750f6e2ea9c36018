"""-g/--mcg and -M/--MGID: the send tests over a UD multicast group, as
perftest's send_bw.c/send_lat.c with multicast_resources.c do it.

The receiving side (the server) attaches its QP to the group
(ibv_attach_mcast) and gives the group as its keys: the MGID as its GID,
the MLID as its LID and QPN 0xFFFFFF, so the sender's ordinary UD path
(an AH to that GID, remote QPN 0xFFFFFF, perftest's Q_Key) sends to the
group.  The sender only checks it may use the group (set_mcast_group's
queries).  The group's GID is MCG_GID, or -M's, parsed as perftest parses
it (16 ':'-separated strtoll bytes).  On an InfiniBand port perftest joins
the group through the SA (an MCMemberRecord SET by MAD): softrdma's
perftest has no MAD client, so there it fails with perftest's message; a
RoCE port joins nothing (the device joins the IP group on attach).
"""

from __future__ import annotations

import sys
import time

from ...verbs import addr as addr_m
from ...verbs.errors import PyverbsError
from ..libc import strtol
from . import params as P

QPNUM_MCAST = 0xFFFFFF
MCG_GID = bytes([255, 1, 0, 0, 0, 2, 201, 133, 0, 0, 0, 0, 0, 0, 0, 0])
DEF_PKEY_IDX = 0
IBV_LINK_LAYER_INFINIBAND = 1


def _err(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


def set_multicast_gid(user_mgid: str | None, is_client: bool) -> bytes:
    """multicast_resources.c's set_multicast_gid."""
    gid = bytearray(MCG_GID)
    if user_mgid:
        parts = user_mgid.split(":")
        for i, part in enumerate(parts[:16]):
            gid[i] = strtol(part) & 0xFF          # (unsigned char)strtoll(tmp, NULL, 0)
    elif is_client:
        gid[15] += 1
    return bytes(gid)


def set_mcast_group(res, p: P.Params) -> bool:
    """send_bw.c's set_mcast_group: the port's GID, P_Key and attributes;
    on an InfiniBand port the SA registration."""
    try:
        res.ctx.query_gid(p.ib_port, p.gid_index)
        res.ctx.query_pkey(p.ib_port, DEF_PKEY_IDX)
        attr = res.ctx.query_port(p.ib_port)
    except PyverbsError:
        return False
    if attr.link_layer == IBV_LINK_LAYER_INFINIBAND:
        _err("Couldn't Register the Mcast group on the SM\n")
        _err(" (softrdma's perftest sends no SA MADs: multicast runs on RoCE ports)\n")
        return False
    return True


class Group:
    """The group one run uses, and the QPs it attached."""

    def __init__(self):
        self.mgid = b""
        self.mlid = 0
        self.attached: list = []

    def attach_receiver(self, res, p: P.Params, my: list) -> bool:
        """send_set_up_connection's multicast part (the server)."""
        self.mgid = set_multicast_gid(p.user_mgid, p.machine == P.CLIENT)
        if not set_mcast_group(res, p):
            return False
        gid = addr_m.GID(self.mgid)
        for qp in res.qps:
            try:
                qp.attach_mcast(gid, self.mlid)
            except PyverbsError:
                _err("Couldn't attach QP to MultiCast group\n")
                return False
            self.attached.append(qp)
        for d in my:
            d.gid, d.lid, d.qpn = self.mgid, self.mlid, QPNUM_MCAST
        return True

    def join_sender(self, res, p: P.Params, rem: list) -> bool:
        """The sender's join of the group its peer gave: send_bw's client
        (set_mcast_group on that group), send_lat's both sides (on an
        InfiniBand port an SA join of the peer's group, which softrdma's
        perftest cannot send)."""
        if p.tst == P.LAT:
            try:
                attr = res.ctx.query_port(p.ib_port)
            except PyverbsError:
                attr = None
            if attr is None or attr.link_layer == IBV_LINK_LAYER_INFINIBAND:
                _err(" Failed to Join Mcast request\n")
                return False
        elif not set_mcast_group(res, p):
            _err(" Unable to Join Sender to Mcast gid\n")
            return False
        time.sleep(0.05)            # perftest's 50 ms for a join to reach the fabric's switches
        return True

    def detach(self, p: P.Params) -> bool:
        """send_destroy_ctx's detach (its messages are perftest's, send_bw's
        saying "attach")."""
        ok = True
        gid = addr_m.GID(self.mgid) if self.attached else None
        for qp in self.attached:
            try:
                qp.detach_mcast(gid, self.mlid)
            except PyverbsError:
                _err("Couldn't dettach QP to MultiCast group\n" if p.tst == P.LAT
                     else "Couldn't attach QP to MultiCast group\n")
                ok = False
                break
        self.attached = []
        return ok
