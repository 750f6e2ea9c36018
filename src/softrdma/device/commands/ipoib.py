"""The ``ipoib`` control command: the daemon's IPoIB interfaces
(``device.ipoib_host``) -- ``show`` (each interface, its groups, paths,
neighbours and counters; one by ``ifname``), ``create_child`` /
``delete_child`` (``ip link add link ib0 name ib0.8001 type ipoib pkey
0x8001``, ``ip link del ib0.8001``) and ``set`` (the ``mode`` and
``umcast`` sysfs files; connected mode's ``cm_tx_idle``, ``cm_rx_idle``,
``cm_max_conn_qp``).  Changes need CAP_NET_ADMIN, as rtnetlink's."""

from __future__ import annotations

import errno

from ...errors import VerbsError
from ...uapi import request as rq
from .link import _link_admin


def cmd_ipoib(daemon, c, m, fds):
    action = rq.string(m, "action", 16, "show")
    host = daemon.ipoib
    name = rq.string(m, "ifname", 15, "")
    if action == "show":
        if name and name not in host.ifs:
            raise VerbsError(errno.ENODEV, f"no IPoIB interface {name!r}")
        return {"interfaces": host.show(name or None)}, []
    if action not in ("create_child", "delete_child", "set"):
        raise VerbsError(errno.EINVAL, f"no ipoib action {action!r}")
    _link_admin(c)
    if action == "create_child":
        ifc = host.create_child(rq.string(m, "parent", 15), rq.uint(m, "pkey", rq.U32), name or None)
        return {"interfaces": host.show(ifc.name)}, []
    if action == "delete_child":
        host.delete_child(name)
        return {"interfaces": []}, []
    host.set_attr(name, rq.string(m, "attr", 16), rq.string(m, "value", 16))
    return {"interfaces": host.show(name)}, []
