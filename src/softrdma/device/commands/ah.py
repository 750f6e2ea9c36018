"""Address handles: create and destroy, and the address-vector check that
modify_qp's ah_attr also goes through."""

from __future__ import annotations

import errno

from ...errors import VerbsError
from ...uapi import request as rq
from ..ib import LINK_LAYER_IB
from ..session import room_for


def checked_av(daemon, c, d: dict):
    """An address vector the device can use (``check_av``: RoCE -- its
    source GID exists and can reach the destination's family, as the
    kernel's rdma_check_ah_attr / rdma_resolve_ip require; InfiniBand -- a
    DLID, or a GRH with a source GID; else EINVAL); every field fits its
    ibv_ah_attr field first."""
    f = rq.ah_attr(d)
    if "dgid" in f:
        f["dgid"] = f["dgid"].hex()
    if c.device.link_layer != LINK_LAYER_IB:          # RoCE: no LRH
        f.pop("src_path_bits", None)
        f.pop("static_rate", None)
    if "flow_label" in f:
        f["flow_label"] &= 0xFFFFF                   # 20 bits on the wire; the rest is ignored
    av = c.device.av_from(f)
    c.device.check_av(av, daemon.by_ip)
    return av


def cmd_create_ah(daemon, c, m, fds):
    pd = c.get(m.get("pd"), "pd")
    av = checked_av(daemon, c, m.get("attr"))
    if not av.is_global and c.device.link_layer != LINK_LAYER_IB:
        raise VerbsError(errno.EINVAL, "RoCE address handles need a GRH")
    room_for(c, "ah")
    h = c.add("ah", av)
    c.ah_pd[h] = pd
    return {"ah": h}, []


def cmd_destroy_ah(daemon, c, m, fds):
    c.get(m.get("ah"), "ah")
    del c.objects[m["ah"]]
    c.ah_pd.pop(m["ah"], None)
    return {}, []
