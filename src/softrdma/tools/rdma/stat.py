"""``rdma statistic``: iproute2 6.1's rdma/stat.c and stat-mr.c over softrdmad.

The same words (any prefix), the same output and messages
(docs/formats/rdma_statistic.md), the daemon's ``stat_*`` commands
(``device.stat``) standing in for RDMA_NLDEV_CMD_STAT_*:

* ``statistic [show|list] [link DEV[/PORT]]``: the port's hw counters
  (rxe's names);
* ``statistic qp [show|list] [link DEV[/PORT] [cntn|lqpn|pid|qp-type V]...]``:
  the counters QPs are bound to, each with its bound QPNs;
* ``statistic qp mode [link DEV[/PORT]]``, ``statistic qp set link
  DEV[/PORT] auto {type[,pid] on | off}``, ``statistic qp bind link
  DEV/PORT lqpn N [cntn M]``, ``statistic qp unbind link DEV/PORT cntn M
  [lqpn N]`` (without lqpn: every QP of the counter);
* ``statistic mode [supported] [link ...]``, ``statistic set link DEV/PORT
  optional-counters NAMES``, ``statistic unset link DEV/PORT
  optional-counters`` (rxe has no optional counters: mode prints nothing,
  set fails, unset succeeds);
* ``statistic mr`` / ``statistic show mr [dev DEV] [mrn N]``: one line per
  MR, its mrn (rxe fills in no per-MR counters).

iproute2's quirks are kept: a filter without ``link`` is an unknown
parameter; ``qp show`` hides a counter when any of its QPs fails the lqpn
filter; bind takes ``lqpn`` first and ``cntn`` second, and a word in the
wrong place fails silently (exit 1); unbinding a whole counter that does
not exist prints nothing and exits 1.
"""

from __future__ import annotations

import errno

from ...uapi.rdma_netlink import RDMA_COUNTER_MASK_PID, RDMA_COUNTER_MASK_QP_TYPE, RDMA_COUNTER_MODE_AUTO
from ..libc import c_int, strtol
from .res import qp_type_str, res_objects
from .utils import Rd, get_task_name, strcmpx

STAT_HELP = """\
Usage: {0} [ OPTIONS ] statistic {{ COMMAND | help }}
       {0} statistic OBJECT show
       {0} statistic OBJECT show link [ DEV/PORT_INDEX ] [ FILTER-NAME FILTER-VALUE ]
       {0} statistic OBJECT mode
       {0} statistic OBJECT set COUNTER_SCOPE [DEV/PORT_INDEX] auto {{CRITERIA | off}}
       {0} statistic OBJECT bind COUNTER_SCOPE [DEV/PORT_INDEX] [OBJECT-ID] [COUNTER-ID]
       {0} statistic OBJECT unbind COUNTER_SCOPE [DEV/PORT_INDEX] [COUNTER-ID]
       {0} statistic show
       {0} statistic show link [ DEV/PORT_INDEX ]
       {0} statistic mode [ supported ]
       {0} statistic mode [ supported ] link [ DEV/PORT_INDEX ]
       {0} statistic set link [ DEV/PORT_INDEX ] optional-counters [ OPTIONAL-COUNTERS ]
       {0} statistic unset link [ DEV/PORT_INDEX ] optional-counters
where  OBJECT: = {{ qp }}
       CRITERIA : = {{ type }}
       COUNTER_SCOPE: = {{ link | dev }}
       FILTER_NAME: = {{ cntn | lqpn | pid }}
Examples:
       {0} statistic qp show
       {0} statistic qp show link mlx5_2/1
       {0} statistic qp mode
       {0} statistic qp mode link mlx5_0
       {0} statistic qp set link mlx5_2/1 auto type on
       {0} statistic qp set link mlx5_2/1 auto off
       {0} statistic qp bind link mlx5_2/1 lqpn 178
       {0} statistic qp bind link mlx5_2/1 lqpn 178 cntn 4
       {0} statistic qp unbind link mlx5_2/1 cntn 4
       {0} statistic qp unbind link mlx5_2/1 cntn 4 lqpn 178
       {0} statistic show
       {0} statistic show link mlx5_2/1
       {0} statistic mode
       {0} statistic mode link mlx5_2/1
       {0} statistic mode supported
       {0} statistic mode supported link mlx5_2/1
       {0} statistic set link mlx5_2/1 optional-counters cc_rx_ce_pkts,cc_rx_cnp_pkts
       {0} statistic unset link mlx5_2/1 optional-counters
"""

#: auto_params[]: the auto-mode criteria, in the order the mode string lists them
AUTO_PARAMS = (("type", RDMA_COUNTER_MASK_QP_TYPE), ("pid", RDMA_COUNTER_MASK_PID))
#: stat_valid_filters[] (the help lists three; qp-type is accepted too)
STAT_FILTERS = (("cntn", True), ("lqpn", True), ("pid", True), ("qp-type", False))
#: stat_mr_valid_filters[]
STAT_MR_FILTERS = (("mrn", True),)


def stat_help(rd: Rd) -> int:
    rd.out(STAT_HELP.format(rd.prog))
    return 0


def _hwcounters(rd: Rd, pairs) -> None:
    """res_get_hwcounters(print=true): "name value " each; -p in text mode
    puts every counter on its own indented line."""
    for name, v in pairs:
        if rd.pretty and not rd.json_output:
            rd.pt("\n    ")
        rd.pr(name, v, f"{name} {v} ")


def _dev_port(rd: Rd) -> dict:
    return {"dev": rd.dev["ifindex"], "port": rd.port_idx}


# ==================================================================== statistic show
def stat_show_one_link(rd: Rd) -> int:
    if not rd.port_idx:
        return 0
    r = rd.call("stat_get", **_dev_port(rd))
    if r is None:
        return -errno.EIO
    rd.open_obj()
    rd.pr("ifname", r["ifname"], f"link {r['ifname']}/")
    rd.pr("port", r["port"], f"{r['port']} ")
    _hwcounters(rd, r["hwcounters"])
    rd.newline()
    return 0


def stat_show(rd: Rd) -> int:
    def link():
        return rd.exec_link(lambda: stat_show_one_link(rd), False)
    return rd.exec_cmd([(None, link), ("link", link), ("mr", lambda: stat_mr(rd)),
                        ("help", lambda: stat_help(rd))], "parameter")


# ==================================================================== statistic mr
def stat_mr(rd: Rd) -> int:
    """RES_FUNC(stat_mr, ...): per device, one line per MR with its mrn."""
    ret = rd.build_filter(STAT_MR_FILTERS)
    if ret:
        return ret
    ret = rd.set_arg_to_devname()
    if ret:
        return ret

    def one_dev():
        mrs = res_objects(rd, "mr")
        if mrs is None:
            return -errno.EIO
        for r in mrs:
            if rd.filtered("mrn", r.get("id", 0), "id" in r):
                continue
            rd.open_obj()
            rd.print_dev()
            rd.u("mrn", r.get("id", 0), "id" in r)
            rd.newline()
        return 0
    return rd.exec_dev(one_dev)


# ==================================================================== statistic qp show
def _counter_line(rd: Rd, names: list[str], e: dict) -> None:
    """res_counter_line(): filters, then link, cntn, the auto criteria,
    the values and the bound QPNs."""
    cntn = e["cntn"]
    if rd.filtered("cntn", cntn):
        return
    qp_type = e.get("qp_type")
    # rd_is_string_filtered_attr() tests the value even without the attribute
    # (type 0, "SMI"): iproute2's own quirk
    if rd.str_filtered("qp-type", qp_type_str(qp_type or 0)):
        return
    pid = e.get("pid")
    comm = get_task_name(pid) if pid is not None else None
    if rd.filtered("pid", pid or 0, pid is not None):
        return
    if any(rd.filtered("lqpn", q) for q in e["lqpn"]):
        return
    rd.open_obj()
    rd.print_link(e["port"])
    rd.pr("cntn", cntn, f"cntn {cntn} ")
    if qp_type is not None:
        rd.pr("qp-type", qp_type_str(qp_type), f"qp-type {qp_type_str(qp_type)} ")
    rd.u("pid", pid or 0, pid is not None)
    rd.comm(comm)
    _hwcounters(rd, zip(names, e["values"]))
    rd.open_array("lqpn", "\n    LQPN: <")
    for i, q in enumerate(e["lqpn"]):
        if i:
            rd.pt(",")
        rd.pr(None, q, str(q))
    rd.close_array(">")
    rd.newline()


def stat_qp_show_one_link(rd: Rd) -> int:
    if not rd.port_idx:
        return 0
    ret = rd.build_filter(STAT_FILTERS)
    if ret:
        return ret
    start = 0
    while True:
        r = rd.call("stat_dump", res="qp", start=start, **_dev_port(rd))
        if r is None:
            return -errno.EIO
        for e in r["counters"]:
            _counter_line(rd, r["names"], e)
        if r.get("next") is None:
            return 0
        start = r["next"]


# ==================================================================== statistic qp mode / set
def auto_mode_str(mode: int, mask: int) -> str:
    """prepare_auto_mode_str(): "qp auto type,pid on" / "qp auto off"."""
    if mode != RDMA_COUNTER_MODE_AUTO or not mask:
        return "qp auto off"
    return "qp auto " + ",".join(n for n, bit in AUTO_PARAMS if mask & bit) + " on"


def stat_one_qp_link_get_mode(rd: Rd) -> int:
    if not rd.port_idx:
        return 0
    r = rd.call("stat_get", res="qp", mode=True, **_dev_port(rd))
    if r is None:
        return -errno.EIO
    output = auto_mode_str(r["mode"], r.get("mask", 0))
    rd.open_obj()
    rd.print_link(r["port"])
    rd.pr("mode", output, f"mode {output} ")
    rd.newline()
    return 0


def _get_auto_mode_mask(rd: Rd) -> int:
    """stat_get_auto_mode_mask(): "type", "pid" or both, comma-separated."""
    if rd.no_arg():
        return 0
    mask = 0
    for mode in (t for t in rd.argv0().split(",") if t):      # strtok: empty tokens vanish
        bit = next((b for n, b in AUTO_PARAMS if n == mode), None)
        if bit is None:
            rd.err(f"Unknown auto mode '{mode}'.")
            return 0
        mask |= bit
    if mask:
        rd.arg_inc()
    return mask


def stat_one_qp_set_link_auto(rd: Rd) -> int:
    if rd.no_arg():
        return -errno.EINVAL
    if strcmpx(rd.argv0(), "off"):
        rd.arg_inc()
        mask = 0
    else:
        mask = _get_auto_mode_mask(rd)
        if not mask or rd.no_arg():
            return -errno.EINVAL
        if not strcmpx(rd.argv0(), "on"):
            rd.err(f"Unknown parameter '{rd.argv0()}'.")
            return -errno.EINVAL
        rd.arg_inc()
    ok = rd.call("stat_set", res="qp", mode="auto", mask=mask, **_dev_port(rd))
    return 0 if ok is not None else -errno.EIO


def stat_one_qp_set_link(rd: Rd) -> int:
    if not rd.port_idx:
        return 0
    return rd.exec_cmd([(None, lambda: stat_one_qp_link_get_mode(rd)),
                        ("auto", lambda: stat_one_qp_set_link_auto(rd))], "parameter")


# ==================================================================== statistic qp bind / unbind
def _get_arg(rd: Rd, arg: str) -> int:
    """stat_get_arg(): "ARG VALUE" -> strtol(VALUE) as a C int, or -EINVAL
    (silently) when the word is not ARG."""
    if rd.no_arg() or not strcmpx(rd.argv0(), arg):
        return -errno.EINVAL
    rd.arg_inc()
    if not rd.no_arg() and any(ch in ",-" for ch in rd.argv0()):
        rd.err(f"The parameter {arg} shouldn't include range")
        return -errno.EINVAL
    value = c_int(strtol(rd.argv0() if not rd.no_arg() else "", 10))
    rd.arg_inc()
    return value


def stat_one_qp_bind(rd: Rd) -> int:
    if rd.no_arg():
        stat_help(rd)
        return -errno.EINVAL
    ret = rd.build_filter(STAT_FILTERS)
    if ret:
        return ret
    lqpn = _get_arg(rd, "lqpn")
    if lqpn < 0:
        return lqpn
    kw = {"lqpn": lqpn}
    if not rd.no_arg():
        cntn = _get_arg(rd, "cntn")
        if cntn < 0:
            return cntn
        kw["cntn"] = cntn
    ok = rd.call("stat_set", res="qp", mode="manual", **kw, **_dev_port(rd))
    return 0 if ok is not None else -errno.EIO


def _unbind_lqpn(rd: Rd, cntn: int, lqpn: int) -> int:
    ok = rd.call("stat_del", res="qp", cntn=cntn, lqpn=lqpn, **_dev_port(rd))
    return 0 if ok is not None else -errno.EIO


def stat_one_qp_unbind(rd: Rd) -> int:
    if rd.no_arg():
        stat_help(rd)
        return -errno.EINVAL
    ret = rd.build_filter(STAT_FILTERS)
    if ret:
        return ret
    cntn = _get_arg(rd, "cntn")
    if cntn < 0:
        return cntn
    if not rd.no_arg():
        lqpn = _get_arg(rd, "lqpn")
        if lqpn < 0:
            return lqpn
        return _unbind_lqpn(rd, cntn, lqpn)
    # every QP of the counter; iproute2 reads this reply without rd_recv_msg,
    # so a failure (no such counter) prints nothing
    r = rd.call("stat_get", res="qp", cntn=cntn, quiet=True, **_dev_port(rd))
    if r is None:
        return -1
    for q in r["counters"][0]["lqpn"]:
        if _unbind_lqpn(rd, cntn, q):
            return -1
    return 0


def stat_qp(rd: Rd) -> int:
    def help_():
        return stat_help(rd)

    def show():
        def link():
            return rd.exec_link(lambda: stat_qp_show_one_link(rd), False)
        return rd.exec_cmd([(None, link), ("link", link), ("help", help_)], "parameter")

    def mode():
        def link():
            return rd.exec_link(lambda: stat_one_qp_link_get_mode(rd), False)
        return rd.exec_cmd([(None, link), ("link", link), ("help", help_)], "parameter")

    def set_():
        return rd.exec_cmd([(None, help_), ("link", lambda: rd.exec_link(lambda: stat_one_qp_set_link(rd), False)),
                            ("help", help_)], "parameter")

    def bind():
        return rd.exec_cmd([(None, help_), ("link", lambda: rd.exec_link(lambda: stat_one_qp_bind(rd), True)),
                            ("help", help_)], "parameter")

    def unbind():
        return rd.exec_cmd([(None, help_), ("link", lambda: rd.exec_link(lambda: stat_one_qp_unbind(rd), True)),
                            ("help", help_)], "parameter")

    return rd.exec_cmd([(None, show), ("show", show), ("list", show), ("mode", mode), ("set", set_),
                        ("bind", bind), ("unbind", unbind), ("help", help_)], "parameter")


# ==================================================================== optional counters
def stat_one_link_get_mode(rd: Rd, supported: bool) -> int:
    """do_stat_mode_parse_cb(): the enabled (or supported) optional
    counters; nothing at all when the port has none."""
    if not rd.port_idx:
        return 0
    r = rd.call("stat_get_status", **_dev_port(rd))
    if r is None:
        return -errno.EIO
    first = True
    for cnt in r["hwcounters"]:
        if "dynamic" not in cnt or not (supported or cnt["dynamic"]):
            continue
        if first:
            rd.open_obj()
            rd.pr("ifname", r["ifname"], f"link {r['ifname']}/")
            rd.pr("port", r["port"], f"{r['port']} ")
            rd.open_array("supported optional-counters" if supported else "optional-counters",
                          "supported optional-counters" if supported else "optional-counters")
            rd.pt(" ")
            first = False
        else:
            rd.pt(",")
        if rd.pretty and not rd.json_output:
            rd.pt("\n    ")
        rd.pr(None, cnt["name"], cnt["name"])
    if not first:
        if rd.jw is not None:
            rd.jw.end_array()
        rd.newline()
    return 0


def stat_mode(rd: Rd) -> int:
    def link(supported):
        return lambda: rd.exec_link(lambda: stat_one_link_get_mode(rd, supported), False)

    def supported():
        return rd.exec_cmd([(None, link(True)), ("link", link(True)), ("help", lambda: stat_help(rd))],
                           "parameter")
    return rd.exec_cmd([(None, link(False)), ("link", link(False)), ("show", link(False)),
                        ("supported", supported), ("help", lambda: stat_help(rd))], "parameter")


def _get_arg_str(rd: Rd, arg: str, allow_empty: bool):
    """stat_get_arg_str(): (error, value)."""
    if rd.no_arg() or not strcmpx(rd.argv0(), arg):
        rd.err(f"Unknown parameter '{rd.argv0() if not rd.no_arg() else ''}'.")
        return -errno.EINVAL, None
    rd.arg_inc()
    value = ""
    if not rd.no_arg():
        value = rd.argv0()
        rd.arg_inc()
    if (allow_empty and value) or (not allow_empty and not value):
        stat_help(rd)
        return -errno.EINVAL, None
    return 0, value


def stat_one_set_link(rd: Rd) -> int:
    if not rd.port_idx:
        return 0
    r = rd.call("stat_get_status", **_dev_port(rd))
    if r is None:
        return -errno.EIO
    if rd.no_arg():
        stat_help(rd)
        return -errno.EINVAL
    ret, names = _get_arg_str(rd, "optional-counters", False)
    if ret:
        return ret
    dynamic = {c["name"]: c["index"] for c in r["hwcounters"] if "dynamic" in c}
    indexes = []
    for name in (t for t in names.split(",") if t):
        if name not in dynamic:
            # the callback fails without a netlink error: rd_recv_msg's
            # perror("error") then reports an errno nothing set
            rd.err("error: Success")
            return -errno.EINVAL
        indexes.append(dynamic[name])
    ok = rd.call("stat_set", hwcounters=indexes, **_dev_port(rd))
    return 0 if ok is not None else -errno.EIO


def stat_one_unset_link(rd: Rd) -> int:
    if rd.no_arg():
        stat_help(rd)
        return -errno.EINVAL
    ret, _ = _get_arg_str(rd, "optional-counters", True)
    if ret:
        return ret
    ok = rd.call("stat_set", hwcounters=[], **_dev_port(rd))
    return 0 if ok is not None else -errno.EIO


# ==================================================================== statistic
def cmd_stat(rd: Rd) -> int:
    def set_():
        return rd.exec_cmd([(None, lambda: stat_help(rd)),
                            ("link", lambda: rd.exec_link(lambda: stat_one_set_link(rd), True)),
                            ("help", lambda: stat_help(rd))], "parameter")

    def unset():
        return rd.exec_cmd([(None, lambda: stat_help(rd)),
                            ("link", lambda: rd.exec_link(lambda: stat_one_unset_link(rd), True)),
                            ("help", lambda: stat_help(rd))], "parameter")

    return rd.exec_cmd([(None, lambda: stat_show(rd)), ("show", lambda: stat_show(rd)),
                        ("list", lambda: stat_show(rd)), ("help", lambda: stat_help(rd)),
                        ("qp", lambda: stat_qp(rd)), ("mr", lambda: stat_mr(rd)), ("mode", lambda: stat_mode(rd)),
                        ("set", set_), ("unset", unset)], "statistic command")


__all__ = ["cmd_stat", "STAT_HELP", "auto_mode_str"]
