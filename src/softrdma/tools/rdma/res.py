"""``rdma resource``: iproute2 6.1's rdma/res.c and res-{qp,cmid,cq,mr,pd,
ctx,srq}.c over softrdmad -- the per-device summary and one line per
object, with res.h's filters, from the daemon's ``resources`` dump
(RDMA_NLDEV_CMD_RES_*_GET)."""

from __future__ import annotations

import errno

from .utils import Rd, get_task_name, table_str

QP_TYPES = ("SMI", "GSI", "RC", "UC", "UD", "RAW_IPV6", "RAW_ETHERTYPE", "UNKNOWN", "RAW_PACKET", "XRC_INI",
            "XRC_TGT")
QP_STATES = ("RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR")
PATH_MIG = ("MIGRATED", "REARM", "ARMED")
SRQ_TYPES = ("BASIC", "XRC", "TM")
POLL_CTX = ("DIRECT", "SOFTIRQ", "WORKQUEUE", "UNBOUND_WORKQUEUE")


def qp_type_str(t: int) -> str:
    return "DRIVER" if t == 0xFF else table_str(QP_TYPES, t)


# filters per object: (name, is_number), in res.h's order
FILTERS = {
    "pd": (("dev", False), ("users", True), ("pid", True), ("ctxn", True), ("pdn", True), ("ctxn", True)),
    "mr": (("dev", False), ("rkey", True), ("lkey", True), ("mrlen", True), ("pid", True), ("mrn", True),
           ("pdn", True)),
    "cq": (("dev", False), ("users", True), ("poll-ctx", False), ("pid", True), ("cqn", True), ("ctxn", True)),
    "cm_id": (("link", False), ("lqpn", True), ("qp-type", False), ("state", False), ("ps", False),
              ("dev-type", False), ("transport-type", False), ("pid", True), ("src-addr", False),
              ("src-port", True), ("dst-addr", False), ("dst-port", True), ("cm-idn", True)),
    "qp": (("link", False), ("lqpn", True), ("rqpn", True), ("pid", True), ("sq-psn", True), ("rq-psn", True),
           ("type", False), ("path-mig-state", False), ("state", False), ("pdn", True)),
    "ctx": (("dev", False), ("pid", True), ("ctxn", True)),
    "srq": (("dev", False), ("pid", True), ("srqn", True), ("type", False), ("pdn", True), ("cqn", True),
            ("lqpn", True)),
}

RES_HELP = ("Usage: {0} resource\n"
            "          resource show [DEV]\n"
            "          resource show [qp|cm_id|pd|mr|cq|ctx|srq]\n"
            "          resource show qp link [DEV/PORT]\n"
            "          resource show qp link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show cm_id link [DEV/PORT]\n"
            "          resource show cm_id link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show cq link [DEV/PORT]\n"
            "          resource show cq link [DEV/PORT] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show pd dev [DEV]\n"
            "          resource show pd dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show mr dev [DEV]\n"
            "          resource show mr dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show ctx dev [DEV]\n"
            "          resource show ctx dev [DEV] [FILTER-NAME FILTER-VALUE]\n"
            "          resource show srq dev [DEV]\n"
            "          resource show srq dev [DEV] [FILTER-NAME FILTER-VALUE]\n")


def res_objects(rd: Rd, kind: str) -> list[dict] | None:
    res = rd.resources()
    if res is None:
        return None
    objs = [r for r in res["resources"] if r["kind"] == kind and r.get("dev") == rd.dev["ifname"]]
    return sorted(objs, key=lambda r: (r.get("id", r.get("handle", 0)), r.get("handle", 0)))


def _pid_comm(rd: Rd, r: dict):
    pid = r.get("pid")
    return pid, (get_task_name(pid) if pid is not None else None)


def res_summary_line(rd: Rd) -> int:
    res = rd.resources()
    if res is None:
        return -errno.EIO
    name = rd.dev["ifname"]
    count = {k: 0 for k in ("pd", "cq", "qp", "cm_id", "mr", "ctx", "srq")}
    for r in res["resources"]:
        if r.get("dev") == name and r["kind"] in count:
            count[r["kind"]] += 1
    count["ctx"] = sum(1 for c in res.get("contexts", ()) if c.get("dev") == name)
    rd.open_obj()
    rd.pr("ifindex", rd.dev["ifindex"], f"{rd.dev['ifindex']}: ")
    rd.pr("ifname", name, f"{name}: ")
    for k, v in count.items():
        rd.u(k, v)
    rd.newline()
    return 0


def res_qp(rd: Rd) -> int:
    qps = res_objects(rd, "qp")
    if qps is None:
        return -errno.EIO
    for r in qps:
        port = r.get("port") or 0
        if port != rd.port_idx:
            continue
        t = r["type"]
        connected = t in (2, 3)                       # RC, UC: rqpn, rq-psn
        mig = t in (2, 3, 9, 10)                      # RC, UC, XRC: path-mig-state
        pdn = r.get("pdn")
        if rd.filtered("lqpn", r["lqpn"]) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        if rd.filtered("rqpn", r.get("rqpn", 0), connected) or rd.filtered("rq-psn", r.get("rq_psn", 0), connected):
            continue
        if rd.filtered("sq-psn", r.get("sq_psn", 0)):
            continue
        mig_state = table_str(PATH_MIG, r.get("path_mig_state", 0) if mig else 0)
        if rd.str_filtered("path-mig-state", mig_state):
            continue
        if rd.str_filtered("type", qp_type_str(t)) or rd.str_filtered("state", table_str(QP_STATES, r["state"])):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        rd.open_obj()
        rd.print_link(r.get("port"))
        rd.u("lqpn", r["lqpn"])
        if connected:
            rd.pr("rqpn", r.get("rqpn", 0), f"rqpn {r.get('rqpn', 0)} ")
        rd.pr("type", qp_type_str(t), f"type {qp_type_str(t)} ")
        rd.pr("state", table_str(QP_STATES, r["state"]), f"state {table_str(QP_STATES, r['state'])} ")
        if connected:
            rd.pr("rq-psn", r.get("rq_psn", 0), f"rq-psn {r.get('rq_psn', 0)} ")
        rd.u("sq-psn", r.get("sq_psn", 0))
        if mig:
            rd.pr("path-mig-state", mig_state, f"path-mig-state {mig_state} ")
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        if rd.show_driver_details:              # print_driver_table: the driver's "name value" pairs
            for k, v in r.get("driver", {}).items():
                rd.pr(k, v, f"{k} {v} ")
        rd.newline()
    return 0


CM_ID_STATES = ("IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
                "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING")
CM_ID_PS = {0x0002: "IPoIB", 0x013F: "IPoIB", 0x0106: "TCP", 0x0111: "UDP"}   # res-cmid.c's (IB prints IPoIB)


def res_cm_id(rd: Rd) -> int:
    """res_cm_id_parse_cb: link, state, ps, pid, comm, cm-idn, src-addr, dst-addr."""
    ids = res_objects(rd, "cm_id")
    if ids is None:
        return -errno.EIO
    for r in ids:
        port = r.get("port") or 0
        if port and port != rd.port_idx:
            continue
        ps = CM_ID_PS.get(r["ps"], "---")
        st = CM_ID_STATES[r["state"]] if r["state"] < len(CM_ID_STATES) else "UNKNOWN"
        if rd.str_filtered("ps", ps) or rd.str_filtered("state", st):
            continue
        src, sport = r["src_addr"]
        dst, dport = r["dst_addr"]
        if rd.str_filtered("src-addr", src) or rd.filtered("src-port", sport):
            continue
        if rd.str_filtered("dst-addr", dst) or rd.filtered("dst-port", dport):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0) or rd.filtered("cm-idn", r.get("id", 0)):
            continue
        rd.open_obj()
        rd.print_link(r.get("port"))
        rd.pr("state", st, f"state {st} ")
        rd.pr("ps", ps, f"ps {ps} ")
        rd.u("pid", pid or 0)
        rd.comm(comm)
        rd.u("cm-idn", r.get("id", 0))
        rd.pr("src-addr", f"{src}:{sport}", f"src-addr {src}:{sport} ")
        rd.pr("dst-addr", f"{dst}:{dport}", f"dst-addr {dst}:{dport} ")
        rd.newline()
    return 0


def res_cq(rd: Rd) -> int:
    cqs = res_objects(rd, "cq")
    if cqs is None:
        return -errno.EIO
    for r in cqs:
        users = r.get("users", 0)
        if rd.filtered("users", users) or rd.str_filtered("poll-ctx", table_str(POLL_CTX, 0)):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        ctxn = r.get("ctxn")
        if rd.filtered("cqn", r.get("id", 0), "id" in r) or rd.filtered("ctxn", ctxn or 0, ctxn is not None):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("cqn", r.get("id", 0), "id" in r)
        rd.u("cqe", r["cqe"])
        rd.u("users", users)
        rd.on_off("adaptive-moderation", bool(r.get("dim", False)))
        rd.u("ctxn", ctxn or 0, ctxn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_mr(rd: Rd) -> int:
    mrs = res_objects(rd, "mr")
    if mrs is None:
        return -errno.EIO
    for r in mrs:
        if rd.filtered("mrlen", r["mrlen"]):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        pdn = r.get("pdn")
        if rd.filtered("mrn", r.get("id", 0), "id" in r) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("mrn", r.get("id", 0), "id" in r)
        # the daemon sends keys only to CAP_NET_ADMIN, as the kernel does
        rd.key("rkey", r.get("rkey", 0), "rkey" in r)
        rd.key("lkey", r.get("lkey", 0), "lkey" in r)
        rd.u("mrlen", r["mrlen"])
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_pd(rd: Rd) -> int:
    pds = res_objects(rd, "pd")
    if pds is None:
        return -errno.EIO
    for r in pds:
        users = r.get("users", 0)
        if rd.filtered("users", users):
            continue
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None):
            continue
        ctxn = r.get("ctxn")
        if rd.filtered("ctxn", ctxn or 0, ctxn is not None) or rd.filtered("pdn", r.get("id", 0), "id" in r):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("pdn", r.get("id", 0), "id" in r)
        rd.key("local_dma_lkey", r.get("local_dma_lkey", 0), "local_dma_lkey" in r)
        rd.u("users", users)
        rd.u("ctxn", ctxn or 0, ctxn is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def res_ctx(rd: Rd) -> int:
    res = rd.resources()
    if res is None:
        return -errno.EIO
    ctxs = sorted((c for c in res.get("contexts", ()) if c.get("dev") == rd.dev["ifname"]),
                  key=lambda c: c["ctxn"])
    for c in ctxs:
        pid, comm = _pid_comm(rd, c)
        if rd.filtered("pid", pid or 0, pid is not None) or rd.filtered("ctxn", c["ctxn"]):
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("ctxn", c["ctxn"])
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def _srq_qps(rd: Rd, qpns: list[int]) -> str | None:
    """get_srq_qps(): the kernel's runs of consecutive QPNs, filtered by lqpn,
    as "17,19-21"; None when the line is filtered out."""
    if not qpns:
        return None if rd.key_exist("lqpn") else ""
    runs, start, prev = [], None, None
    for q in sorted(qpns):
        if start is None:
            start = prev = q
        elif q > prev + 1:
            runs.append((start, prev))
            start = prev = q
        else:
            prev = q
    runs.append((start, prev))
    parts = []
    for lo, hi in runs:
        if lo == hi:
            if not rd.filtered("lqpn", lo):
                parts.append(str(lo))
            continue
        a = b = 0
        for q in range(lo, hi + 1):
            if rd.filtered("lqpn", q):
                if a:
                    parts.append(f"{a}-{b}" if b else str(a))
                    a = b = 0
                continue
            if not a:
                a = q
            else:
                b = q
        if a:
            parts.append(f"{a}-{b}" if b else str(a))
    return ",".join(parts) or None


def res_srq(rd: Rd) -> int:
    srqs = res_objects(rd, "srq")
    if srqs is None:
        return -errno.EIO
    for r in srqs:
        pid, comm = _pid_comm(rd, r)
        if rd.filtered("pid", pid or 0, pid is not None) or rd.filtered("srqn", r.get("id", 0), "id" in r):
            continue
        st = table_str(SRQ_TYPES, r.get("type", 0))
        pdn = r.get("pdn")
        if rd.str_filtered("type", st) or rd.filtered("pdn", pdn or 0, pdn is not None):
            continue
        if rd.filtered("cqn", r.get("cqn") or 0, r.get("cqn") is not None):
            continue
        qps = _srq_qps(rd, list(r.get("lqpn", ())))
        if qps is None:
            continue
        rd.open_obj()
        rd.print_dev()
        rd.u("srqn", r.get("id", 0), "id" in r)
        rd.pr("type", st, f"type {st} ")
        if qps:
            rd.open_array("lqpn", "lqpn")
            rd.pt(" ")
            toks = qps.split(",")
            for i, tok in enumerate(toks):
                rd.pr(None, tok, tok)
                if i + 1 < len(toks):
                    rd.pt(",")
            rd.pt(" ")
            rd.close_array(None)
        rd.u("pdn", pdn or 0, pdn is not None)
        rd.u("cqn", r.get("cqn") or 0, r.get("cqn") is not None)
        rd.u("pid", pid or 0, pid is not None)
        rd.comm(comm)
        rd.newline()
    return 0


def cmd_res(rd: Rd) -> int:
    def res_help():
        rd.out(RES_HELP.format(rd.prog))
        return 0

    def res_func(kind, line, strict):
        def run():
            ret = rd.build_filter(FILTERS.get(kind))
            if ret:
                return ret
            if FILTERS.get(kind):
                ret = rd.set_arg_to_devname()
                if ret:
                    return ret
            if strict:
                return rd.exec_dev(lambda: line(rd))
            return rd.exec_link(lambda: line(rd), False)
        return run

    def res_show():
        if len(rd.argv) == 1 and rd.dev_map_lookup(False) is not None:
            return rd.exec_dev(lambda: res_summary_line(rd))
        return rd.exec_cmd([(None, res_func(None, res_summary_line, True)),
                            ("qp", res_func("qp", res_qp, False)),
                            ("cm_id", res_func("cm_id", res_cm_id, False)),
                            ("cq", res_func("cq", res_cq, True)),
                            ("mr", res_func("mr", res_mr, True)),
                            ("pd", res_func("pd", res_pd, True)),
                            ("ctx", res_func("ctx", res_ctx, True)),
                            ("srq", res_func("srq", res_srq, True))], "parameter")

    return rd.exec_cmd([(None, res_show), ("show", res_show), ("list", res_show), ("help", res_help)],
                       "resource command")
