"""Resource tracking (``rdma resource show``): every object of every client,
with the ids and fields the kernel's restrack and nldev report."""

from __future__ import annotations

import collections


class Restrack:
    """The restrack ids handed out so far: per device and kind from 0,
    never reused (``xa_alloc_cyclic``); an object keeps its id while it
    lives."""

    def __init__(self):
        self.ids: dict[int, tuple[object, int]] = {}       # id(obj) -> (obj, restrack id)
        self.next: dict[str, tuple[object, dict]] = {}     # device name -> (device, {kind: next id})


def cmd_resources(daemon, c, m, fds):
    """Every object of every client (``rdma resource show``).

    Besides the handle, each object carries what the kernel's restrack
    reports for it: ``id`` -- its pdn/cqn/mrn/srqn (the lqpn for a QP) --
    per device and kind from 0 and never reused (``xa_alloc_cyclic``),
    given when an object is first listed, in creation order; ``ctxn``, the
    id of its client's context; and per kind the kernel's fields (usecnt
    as ``users``, the PD's and CQs' ids, the port once the QP left
    RESET, ...).  ``contexts`` lists every context (client with a device).
    MR keys and addresses and the PD's local_dma_lkey go only to a client
    with CAP_NET_ADMIN (fill_res_mr_entry / fill_res_pd_entry)."""
    keys = c.net_admin
    ids = daemon.restrack.ids
    nxt = daemon.restrack.next

    def rid(dev, kind, obj):
        e = ids.get(id(obj))
        if e is not None and e[0] is obj:
            return e[1]
        d = nxt.get(dev.name)
        if d is None or d[0] is not dev:
            d = nxt[dev.name] = (dev, {})
        n = d[1].get(kind, 0)
        d[1][kind] = (n + 1) & 0xFFFFFFFF
        ids[id(obj)] = (obj, n)                  # holding obj keeps id(obj) from being reused
        return n

    live = set()
    for cl in daemon.clients.values():           # ids in creation order: clients, then handles
        if cl.device is not None:
            live.add(id(cl))
            rid(cl.device, "ctx", cl)
        for h in sorted(cl.objects):
            kind, obj = cl.objects[h]
            if kind in ("pd", "cq", "mr", "srq") and cl.device is not None:
                live.add(id(obj))
                rid(cl.device, kind, obj)
            elif kind == "cm_id" and obj.dev is not None:
                live.add(id(obj))
                rid(obj.dev, kind, obj)
    for k in [k for k in ids if k not in live]:
        del ids[k]
    out = []
    contexts = []
    for cl in daemon.clients.values():
        dev = cl.device
        if dev is not None:
            contexts.append({"dev": dev.name, "ctxn": rid(dev, "ctx", cl), "pid": cl.pid, "comm": cl.comm})
        objs = cl.objects
        # one pass over the client's objects for what the entries refer to
        # (thousands of objects must not cost thousands of passes each)
        qps = [o for k, o in objs.values() if k == "qp"]
        pds = {id(o): o for k, o in objs.values() if k == "pd"}
        srqs = {id(o.srq): o for k, o in objs.values() if k == "srq"}
        pd_users: dict[int, int] = collections.Counter()
        for k, o in objs.values():
            p = (o.qp.pd if k == "qp" else o[0].pd if k == "mr" else o.srq.pd if k == "srq"
                 else o.pd if k == "mw" else None)
            if p is not None:
                pd_users[id(p)] += 1
        cq_users: dict[int, int] = collections.Counter()
        srq_qpns: dict[int, list] = collections.defaultdict(list)
        for d in qps:
            cq_users[id(d.qp.send_cq)] += 1
            cq_users[id(d.qp.recv_cq)] += 1
            if d.qp.srq is not None:
                srq_qpns[id(d.qp.srq)].append(d.qp.qp_num)

        def pdn(pd, dev=dev, pds=pds):
            return rid(dev, "pd", pd) if pds.get(id(pd)) is pd else None

        for h, (kind, obj) in objs.items():
            r = {"pid": cl.pid, "comm": cl.comm, "kind": kind, "handle": h,
                 "dev": cl.device.name if cl.device else None}
            if dev is not None:
                r["ctxn"] = rid(dev, "ctx", cl)
            if kind == "qp":
                r.update(lqpn=obj.qp.qp_num, type=int(obj.qp.qp_type), state=int(obj.qp.state),
                         rqpn=obj.qp.dest_qpn, sq_psn=obj.qp.req_psn, rq_psn=obj.qp.resp_psn)
                q = obj.qp
                s = srqs.get(id(q.srq)) if q.srq is not None else None
                r.update(id=q.qp_num, pdn=pdn(q.pd), srqn=rid(dev, "srq", s) if s is not None else None,
                         port=int(q.attr.port_num) if int(q.state) != 0 else None,
                         path_mig_state=int(q.attr.path_mig_state),
                         path_mtu=int(dev.caps.active_mtu if int(q.qp_type) == 4 else q.attr.path_mtu),
                         send_cqn=rid(dev, "cq", q.send_cq), recv_cqn=rid(dev, "cq", q.recv_cq))
                if q.rp is not None:            # DCQCN's limiter (RDMA_NLDEV_ATTR_DRIVER entries)
                    r["driver"] = q.rp.as_driver()
            elif kind == "mr":
                if keys:
                    r.update(lkey=obj[0].lkey, rkey=obj[0].rkey, iova=obj[0].addr)
                r.update(mrlen=obj[0].length, id=rid(dev, "mr", obj), pdn=pdn(obj[0].pd), access=obj[0].access)
            elif kind == "cq":
                r.update(cqe=obj.ring.nslots - 1)
                r.update(id=rid(dev, "cq", obj), users=cq_users[id(obj)], dim=False)
            elif kind == "pd":
                r.update(id=rid(dev, "pd", obj), users=pd_users[id(obj)])
                if keys:
                    r.update(local_dma_lkey=0)
            elif kind == "cm_id":
                # fill_res_cm_id_entry: only IDs on a device; no lqpn (a user QP is
                # not the kernel's cm_id->qp)
                if obj.dev is not None:
                    r.update(dev=obj.dev.name, port=obj.port_num, id=rid(obj.dev, "cm_id", obj), ps=obj.ps,
                             state=obj.state, src_addr=[str(obj.src_ip or "0.0.0.0"), obj.src_port],
                             dst_addr=[str(obj.dst_ip or ("0.0.0.0" if obj.family == 4 else "::")),
                                       obj.dst_port])
            elif kind == "srq":
                lq = srq_qpns.get(id(obj.srq), [])
                r.update(id=rid(dev, "srq", obj), pdn=pdn(obj.srq.pd), type=0, lqpn=sorted(lq), users=len(lq))
            out.append(r)
    return {"resources": out, "contexts": contexts}, []
