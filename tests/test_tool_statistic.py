"""softrdma rdma statistic: iproute2 6.1's ``rdma statistic`` over a real
softrdmad, with real traffic (two RC QPs over the daemon's loopback path).

The expected text is iproute2's formats (docs/formats/rdma_statistic.md)
written out; the expected values are what the traffic must produce, packet
by packet: a SEND of 3000 bytes at MTU 1024 is 3 request packets and 3000
bytes, a READ of 5000 bytes is 1 request and 5 response packets, and so on.
Text and JSON are both parsed back and must agree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types

import pytest

from daemon_helpers import daemon_in_shm
from rc_pair import RcPair, ipv4_gid_index, rc_attr
from softrdma.enums import (IBV_QPT_RC, IBV_QPT_UD, IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR,
                            IBV_WR_SEND)
from softrdma.tools import rdma as tool
from softrdma.tools.rdma.stat import STAT_HELP
from softrdma.transport.counters import HW_COUNTERS, QP_COUNTERS

HW_NAMES = [c.name for c in HW_COUNTERS]           # rxe's, then the congestion counters (mlx5's names)
QP_NAMES = [c.name for c in QP_COUNTERS]
MTU = 1024


@pytest.fixture
def env(monkeypatch):
    with daemon_in_shm("stat") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        from softrdma.verbs import device
        ctx = device.Context(name="rxe0")
        try:
            yield types.SimpleNamespace(daemon=d, ctx=ctx)
        finally:
            ctx.close()


def run(capsys, *args):
    rc = tool.main(list(args), prog="rdma")
    out, err = capsys.readouterr()
    return rc, out, err


def ok(capsys, *args) -> str:
    rc, out, err = run(capsys, *args)
    assert (rc, err) == (0, ""), (args, rc, err)
    return out


# ------------------------------------------------------------------ parsing the text back
def parse_pairs(words: list[str]) -> dict:
    assert len(words) % 2 == 0, words
    return {k: (int(v) if v.isdigit() else v) for k, v in zip(words[::2], words[1::2])}


def parse_show(text: str) -> dict:
    """``link DEV/PORT name value ...`` lines -> {"DEV/PORT": {name: value}}."""
    out = {}
    for line in text.splitlines():
        assert line.startswith("link ") and line.endswith(" "), repr(line)
        words = line.split()
        out[words[1]] = parse_pairs(words[2:])
    return out


def parse_counters(text: str) -> list[dict]:
    """``link DEV/PORT cntn N [qp-type T] [pid P comm C] name value ...``
    then ``    LQPN: <a,b>`` -> one dict per counter ("lqpn": [a, b])."""
    lines = text.splitlines()
    assert len(lines) % 2 == 0, text
    out = []
    for head, qps in zip(lines[::2], lines[1::2]):
        assert head.startswith("link ") and head.endswith(" "), repr(head)
        assert qps.startswith("    LQPN: <") and qps.endswith(">"), repr(qps)
        words = head.split()
        e = parse_pairs(words[2:])
        e["link"] = words[1]
        e["lqpn"] = [int(q) for q in qps[len("    LQPN: <"):-1].split(",")]
        out.append(e)
    return out


def values(e: dict) -> dict:
    return {k: e[k] for k in QP_NAMES}


# ------------------------------------------------------------------ statistic show
def test_show_port_counters_follow_traffic(env, capsys):
    zero = "link rxe0/1 " + "".join(f"{n} 0 " for n in HW_NAMES) + "\n"
    for args in (["statistic"], ["stat", "show"], ["sta", "l"], ["stat", "show", "link", "rxe0/1"],
                 ["stat", "show", "link", "rxe0"]):
        assert run(capsys, *args) == (0, zero, ""), args
    p = RcPair(env.ctx)
    n, s, m, w, r, rb, f = 7, 3000, 3, 2000, 2, 5000, 4
    p.send(n, s)
    p.write(m, w)
    p.read(r, rb)
    p.fetch_add(f)
    text = parse_show(ok(capsys, "stat", "show"))["rxe0/1"]
    assert list(text) == HW_NAMES
    requests = n * 3 + m * 2 + r + f
    assert text["sent_pkts"] == text["rcvd_pkts"] >= requests + r * 5 + f      # + the ACKs
    assert text["rdma_sends"] == n + m and text["rdma_recvs"] == n
    assert all(text[k] == 0 for k in HW_NAMES if k not in ("sent_pkts", "rcvd_pkts", "rdma_sends", "rdma_recvs"))
    js = json.loads(ok(capsys, "-j", "stat", "show"))
    assert js == [{"ifname": "rxe0", "port": 1, **text}]
    assert list(js[0]) == ["ifname", "port"] + HW_NAMES              # stat_show_parse_cb: no ifindex
    pretty = ok(capsys, "-p", "stat", "show", "link", "rxe0/1")
    assert pretty == "link rxe0/1 \n" + "".join(f"    {k} {v} \n" for k, v in text.items())
    assert ok(capsys, "-j", "-p", "stat", "show").startswith('[ {\n        "ifname": "rxe0",\n        "port": 1,\n')
    assert ok(capsys, "stat") == ok(capsys, "stat", "show", "link", "rxe0/1")     # one device, one port
    p.close()


def test_help_and_unknown_words(env, capsys):
    help_text = STAT_HELP.format("rdma")
    assert help_text.count("\n") == 36 and help_text.startswith(
        "Usage: rdma [ OPTIONS ] statistic { COMMAND | help }\n       rdma statistic OBJECT show\n")
    for args in (["stat", "help"], ["stat", "qp", "help"], ["stat", "qp", "set"], ["stat", "qp", "bind"],
                 ["stat", "show", "help"], ["stat", "mode", "help"], ["stat", "set"], ["stat", "unset"]):
        assert run(capsys, *args) == (0, help_text, ""), args
    assert run(capsys, "stat", "foo") == (0, "", "Unknown statistic command 'foo'.\n")
    assert run(capsys, "stat", "qp", "foo") == (0, "", "Unknown parameter 'foo'.\n")
    # a filter needs "link DEV/PORT" before it (stat_qp_show's words are link and help only)
    assert run(capsys, "stat", "qp", "show", "lqpn", "1") == (0, "", "Unknown parameter 'lqpn'.\n")
    assert run(capsys, "stat", "qp", "show", "link", "rxe0/1", "foo", "1") == (
        1, "", "Unsupported filter option: foo\n")
    assert run(capsys, "stat", "qp", "show", "link", "rxe0/1", "lqpn") == (
        1, "", "No filter data was supplied to filter option lqpn\n")
    assert run(capsys, "stat", "qp", "show", "link", "rxe0/1", "lqpn", "x") == (
        1, "", 'lqpn filter accepts "1234567890,-" characters only\n')
    assert run(capsys, "stat", "show", "link", "rxe9/1") == (1, "", "Wrong device name\n")
    assert run(capsys, "-j", "stat", "show", "link", "rxe9/1") == (1, "[]\n", "Wrong device name\n")
    assert run(capsys, "stat", "qp", "bind", "link", "rxe0") == (1, "", "Wrong device name\n")   # strict port
    # nothing bound yet: no counters at all; mode off; rxe has no optional counters
    assert run(capsys, "stat", "qp", "show") == (0, "", "")
    assert run(capsys, "-j", "stat", "qp", "show") == (0, "[]\n", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto off \n"
    assert json.loads(ok(capsys, "-j", "stat", "qp", "mode", "link", "rxe0/1")) == [
        {"ifindex": 0, "ifname": "rxe0", "port": 1, "mode": "qp auto off"}]
    for args in (["stat", "mode"], ["stat", "mode", "supported"], ["stat", "mode", "supported", "link", "rxe0/1"]):
        assert run(capsys, *args) == (0, "", ""), args
    assert run(capsys, "-j", "stat", "mode") == (0, "[]\n", "")
    assert run(capsys, "stat", "set", "link", "rxe0/1", "optional-counters", "cc_rx_ce_pkts") == (
        1, "", "error: Success\n")
    assert run(capsys, "stat", "set", "link", "rxe0/1", "foo", "x") == (1, "", "Unknown parameter 'foo'.\n")
    assert run(capsys, "stat", "set", "link", "rxe0/1") == (1, help_text, "")
    assert run(capsys, "stat", "unset", "link", "rxe0/1", "optional-counters") == (0, "", "")
    assert run(capsys, "stat", "unset", "link", "rxe0/1", "optional-counters", "x") == (1, help_text, "")


def test_stat_mr_lists_every_mr(env, capsys):
    p = RcPair(env.ctx)
    assert ok(capsys, "stat", "mr") == "dev rxe0 mrn 0 \ndev rxe0 mrn 1 \n"
    assert ok(capsys, "stat", "show", "mr", "mrn", "1") == "dev rxe0 mrn 1 \n"
    # stat_mr_valid_filters has mrn only: "dev" is not a filter there (unlike res show mr)
    assert run(capsys, "stat", "mr", "dev", "rxe0", "mrn", "0") == (1, "", "Unsupported filter option: dev\n")
    assert json.loads(ok(capsys, "-j", "stat", "mr")) == [{"ifindex": 0, "ifname": "rxe0", "mrn": 0},
                                                          {"ifindex": 0, "ifname": "rxe0", "mrn": 1}]
    p.close()


# ------------------------------------------------------------------ per-QP counters
def test_per_qp_counters_match_the_traffic(env, capsys):
    p = RcPair(env.ctx)
    a, b = p.a.qp_num, p.b.qp_num
    p.send(5, 100)                                    # before binding: not counted
    assert run(capsys, "stat", "qp", "bind", "link", "rxe0/1", "lqpn", str(a)) == (0, "", "")
    assert run(capsys, "stat", "qp", "bind", "link", "rxe0/1", "lqpn", str(b)) == (0, "", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto off \n"     # MANUAL prints as off
    n, s, m, w, r, rb, f = 6, 3000, 3, 2000, 2, 5000, 4
    p.send(n, s)
    p.write(m, w)
    p.read(r, rb)
    p.fetch_add(f)
    text = parse_counters(ok(capsys, "stat", "qp", "show"))
    assert [(e["link"], e["cntn"], e["lqpn"]) for e in text] == [("rxe0/1", 1, [a]), ("rxe0/1", 2, [b])]
    ca, cb = values(text[0]), values(text[1])
    assert list(text[0]) == ["cntn"] + QP_NAMES + ["link", "lqpn"]        # manual: no qp-type, no pid
    requests = n * 3 + m * 2 + r + f
    # the requester: every request packet and byte it sent, the READ data it got back
    assert (ca["sent_pkts"], ca["sent_bytes"], ca["rcvd_bytes"]) == (requests, n * s + m * w, r * rb)
    assert ca["rdma_sends"] == n + m
    # the responder: every request it received, by kind
    assert (cb["rcvd_pkts"], cb["rcvd_bytes"], cb["sent_bytes"]) == (requests, n * s + m * w, r * rb)
    assert (cb["rdma_recvs"], cb["rx_write_requests"], cb["rx_read_requests"], cb["rx_atomic_requests"]) == (
        n, m, r, f)
    assert ca["rcvd_pkts"] == cb["sent_pkts"] >= r * 5 + f                  # ACKs, READ responses, atomic ACKs
    for c in (ca, cb):
        assert all(c[k] == 0 for k in ("duplicate_request", "out_of_seq_request", "rcvd_rnr_err", "send_rnr_err",
                                       "rcvd_seq_err", "retry_exceeded_err", "local_ack_timeout_err",
                                       "retransmitted_pkts", "send_err"))
    # JSON: the same counters, key order as iproute2 prints them
    js = json.loads(ok(capsys, "-j", "stat", "qp", "show"))
    assert [list(e) for e in js] == [["ifindex", "ifname", "port", "cntn"] + QP_NAMES + ["lqpn"]] * 2
    assert [(e["cntn"], e["lqpn"], {k: e[k] for k in QP_NAMES}) for e in js] == [(1, [a], ca), (2, [b], cb)]
    # -p: one counter per line
    pretty = ok(capsys, "-p", "stat", "qp", "show", "link", "rxe0/1", "cntn", "1")
    assert pretty == ("link rxe0/1 cntn 1 \n" + "".join(f"    {k} {v} \n" for k, v in ca.items())
                      + f"    LQPN: <{a}>\n")
    # filters (link first), numbers and ranges as iproute2's
    show = ["stat", "qp", "show", "link", "rxe0/1"]
    assert [e["cntn"] for e in parse_counters(ok(capsys, *show, "cntn", "2"))] == [2]
    assert [e["cntn"] for e in parse_counters(ok(capsys, *show, "lqpn", f"{a}"))] == [1]
    assert [e["cntn"] for e in parse_counters(ok(capsys, *show, "lqpn", f"{a}-{b + 5}"))] == [1, 2]
    assert ok(capsys, *show, "pid", str(os.getpid())) == ""             # manual counters carry no pid
    # the port's counters saw this and the unbound traffic before it
    port = parse_show(ok(capsys, "stat"))["rxe0/1"]
    assert port["sent_pkts"] == port["rcvd_pkts"] > ca["sent_pkts"] + cb["sent_pkts"] + 5
    assert port["rdma_sends"] == ca["rdma_sends"] + 5 and port["rdma_recvs"] == cb["rdma_recvs"] + 5
    p.close()


def test_a_counter_keeps_what_unbound_qps_did(env, capsys):
    p = RcPair(env.ctx)
    a, b = p.a.qp_num, p.b.qp_num
    bind = ["stat", "qp", "bind", "link", "rxe0/1"]
    assert run(capsys, *bind, "lqpn", str(a)) == (0, "", "")
    assert run(capsys, *bind, "lqpn", str(b), "cntn", "1") == (0, "", "")     # both in counter 1
    p.send(4, 2500)                                                          # 3 packets each
    (c,) = parse_counters(ok(capsys, "stat", "qp", "show"))
    assert (c["cntn"], c["lqpn"]) == (1, [a, b])
    assert c["sent_bytes"] == c["rcvd_bytes"] == 4 * 2500
    assert c["sent_pkts"] == c["rcvd_pkts"] and c["rdma_sends"] == c["rdma_recvs"] == 4
    first = values(c)
    assert run(capsys, "stat", "qp", "unbind", "link", "rxe0/1", "cntn", "1", "lqpn", str(a)) == (0, "", "")
    p.send(3, 1000)                                  # only b's side of this lands in counter 1
    (c,) = parse_counters(ok(capsys, "stat", "qp", "show"))
    assert c["lqpn"] == [b]
    assert c["sent_bytes"] == first["sent_bytes"]                       # a's SENDs: not counted now
    assert c["rcvd_bytes"] == first["rcvd_bytes"] + 3 * 1000            # b received them
    assert c["rcvd_pkts"] == first["rcvd_pkts"] + 3 and c["rdma_recvs"] == 4 + 3
    assert c["rdma_sends"] == 4
    # rebinding a to the counter counts from now on, not what a did meanwhile
    assert run(capsys, *bind, "lqpn", str(a), "cntn", "1") == (0, "", "")
    (c2,) = parse_counters(ok(capsys, "stat", "qp", "show"))
    assert c2["lqpn"] == [a, b] and values(c2) == values(c)
    # unbinding every QP (no lqpn) frees the counter; the port goes back to NONE
    assert run(capsys, "stat", "qp", "unbind", "link", "rxe0/1", "cntn", "1") == (0, "", "")
    assert run(capsys, "stat", "qp", "show") == (0, "", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto off \n"
    assert run(capsys, "stat", "qp", "set", "link", "rxe0/1", "auto", "type", "on") == (0, "", "")   # NONE: allowed
    # destroying a bound QP unbinds it: its counter goes with its last QP
    assert ok(capsys, "stat", "qp", "set", "link", "rxe0/1", "auto", "off") == ""
    assert run(capsys, *bind, "lqpn", str(a)) == (0, "", "")
    p.a.close()
    assert run(capsys, "stat", "qp", "show") == (0, "", "")
    p.close()


def test_error_counters_per_qp(env, capsys):
    ctx = env.ctx
    bind = ["stat", "qp", "bind", "link", "rxe0/1"]
    # RNR: a SEND with no receive posted and rnr_retry 0
    p = RcPair(ctx, rnr_retry=0)
    for q in (p.a, p.b):
        assert run(capsys, *bind, "lqpn", str(q.qp_num)) == (0, "", "")
    from softrdma.verbs import wr
    p.a.post_send(wr.SendWR(1, IBV_WR_SEND, 1, sg=[wr.SGE(p.ma.buf, 10, p.ma.lkey)]))
    assert [w.status for w in p.wait(p.cqa, 1)] == [IBV_WC_RNR_RETRY_EXC_ERR]
    # a local ACK timeout: a QP talking to a QPN nobody has, 3 tries
    t = RcPair(ctx, connect=False)
    gi = ipv4_gid_index(ctx)
    t.a.to_rts(rc_attr(0xABCDE, ctx.query_gid(1, gi), gi, timeout=1, retry_cnt=2))
    assert run(capsys, *bind, "lqpn", str(t.a.qp_num)) == (0, "", "")
    t.a.post_send(wr.SendWR(1, IBV_WR_SEND, 1, sg=[wr.SGE(t.ma.buf, 10, t.ma.lkey)]))
    assert [w.status for w in t.wait(t.cqa, 1)] == [IBV_WC_RETRY_EXC_ERR]
    # duplicates: the link duplicates every packet (softrdma's fault injection)
    d = RcPair(ctx)
    for q in (d.a, d.b):
        assert run(capsys, *bind, "lqpn", str(q.qp_num)) == (0, "", "")
    assert run(capsys, "link", "set", "rxe0", "faults", "dup", "100%") == (0, "", "")
    d.send(20, 100)
    assert run(capsys, "link", "set", "rxe0", "faults", "off") == (0, "", "")
    got = {tuple(e["lqpn"]): values(e) for e in parse_counters(ok(capsys, "stat", "qp", "show"))}
    ra, rb_, ta, da, db = (got[(q.qp_num,)] for q in (p.a, p.b, t.a, d.a, d.b))
    assert (ra["rcvd_rnr_err"], ra["retry_rnr_exceeded_err"], ra["rnr_nak_retry_err"], ra["send_err"]) == (1, 1, 1, 1)
    assert (rb_["send_rnr_err"], rb_["rcvd_pkts"], rb_["rdma_recvs"]) == (1, 1, 0)
    assert (ta["local_ack_timeout_err"], ta["retry_exceeded_err"], ta["retransmitted_pkts"], ta["sent_pkts"],
            ta["rcvd_pkts"]) == (3, 1, 2, 3, 0)
    assert (db["duplicate_request"], db["rdma_recvs"], db["rcvd_pkts"]) == (20, 20, 40)
    assert (da["sent_pkts"], da["retransmitted_pkts"], da["duplicate_request"]) == (20, 0, 0)
    # the port adds them all up (rxe's names)
    port = parse_show(ok(capsys, "stat"))["rxe0/1"]
    assert (port["duplicate_request"], port["rcvd_rnr_err"], port["send_rnr_err"], port["retry_exceeded_err"],
            port["retry_rnr_exceeded_err"]) == (20, 1, 1, 1, 1)
    for x in (p, t, d):
        x.close()


def test_auto_mode_binds_new_qps_by_type(env, capsys):
    from softrdma.verbs import cq, pd, qp
    s = ["stat", "qp", "set", "link", "rxe0/1", "auto"]
    old = RcPair(env.ctx)                                    # made before auto: stays unbound
    assert run(capsys, *s, "type", "on") == (0, "", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto type on \n"
    assert run(capsys, *s, "type", "on") == (0, "", "")        # no change: fine
    p = RcPair(env.ctx)
    pdu = pd.PD(env.ctx)
    cqu = cq.CQ(env.ctx, 16)
    ua = qp.QPAttr()
    ua.qkey = 0x1111
    u1 = qp.QP(pdu, qp.QPInitAttr(IBV_QPT_UD, scq=cqu, rcq=cqu), ua)
    u2 = qp.QP(pdu, qp.QPInitAttr(IBV_QPT_UD, scq=cqu, rcq=cqu), ua)
    reset = qp.QP(pdu, qp.QPInitAttr(IBV_QPT_RC, scq=cqu, rcq=cqu))    # never modified: never bound
    p.send(3, 100)
    text = parse_counters(ok(capsys, "stat", "qp", "show"))
    assert [(e["cntn"], e["qp-type"], e["lqpn"]) for e in text] == [
        (1, "RC", [p.a.qp_num, p.b.qp_num]), (2, "UD", [u1.qp_num, u2.qp_num])]
    assert text[0]["rdma_sends"] == text[0]["rdma_recvs"] == 3 and text[1]["sent_pkts"] == 0
    js = json.loads(ok(capsys, "-j", "stat", "qp", "show", "link", "rxe0/1", "qp-type", "ud"))
    assert [(e["cntn"], e["qp-type"]) for e in js] == [(2, "UD")]
    assert list(js[0])[:5] == ["ifindex", "ifname", "port", "cntn", "qp-type"]
    assert reset.qp_num not in text[0]["lqpn"] + text[1]["lqpn"]
    # counters exist: criteria cannot change (the kernel's extack, then perror)
    assert run(capsys, *s, "type,pid", "on") == (
        1, "", "Error: Modifying auto mode is not allowed when there is a bound QP\n"
               "error: Device or resource busy\n")
    bind = ["stat", "qp", "bind", "link", "rxe0/1", "lqpn", str(old.a.qp_num)]
    assert run(capsys, *bind) == (1, "", "error: Invalid argument\n")                   # AUTO: no manual binds
    unbind = ["stat", "qp", "unbind", "link", "rxe0/1", "cntn", "1", "lqpn", str(p.a.qp_num)]
    assert run(capsys, *unbind) == (1, "", "error: Invalid argument\n")
    # auto off keeps the counters (MANUAL); now they can be unbound
    assert run(capsys, *s, "off") == (0, "", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto off \n"
    assert run(capsys, *unbind) == (0, "", "")
    assert [e["lqpn"] for e in parse_counters(ok(capsys, "stat", "qp", "show"))] == [[p.b.qp_num],
                                                                                     [u1.qp_num, u2.qp_num]]
    # the word errors of "set ... auto"
    assert run(capsys, *s) == (1, "", "")
    assert run(capsys, *s, "foo", "on") == (1, "", "Unknown auto mode 'foo'.\n")
    assert run(capsys, *s, "type") == (1, "", "")
    assert run(capsys, *s, "type", "maybe") == (1, "", "Unknown parameter 'maybe'.\n")
    assert ok(capsys, "stat", "qp", "set", "link", "rxe0/1") == "link rxe0/1 mode qp auto off \n"
    for o in (u1, u2, reset, cqu, pdu):
        o.close()
    p.close()
    old.close()


CHILD = textwrap.dedent("""
    import sys
    from softrdma.enums import IBV_QPT_RC
    from softrdma.verbs import device, pd, cq, qp
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    c = cq.CQ(ctx, 16)
    q = qp.QP(p, qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c))
    a = qp.QPAttr(); a.qp_access_flags = 15
    q.to_init(a)
    print(q.qp_num, flush=True)
    sys.stdin.readline()
""")


def test_auto_mode_by_pid(env, capsys):
    assert run(capsys, "stat", "qp", "set", "link", "rxe0/1", "auto", "type,pid", "on") == (0, "", "")
    assert ok(capsys, "stat", "qp", "mode") == "link rxe0/1 mode qp auto type,pid on \n"
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env=dict(os.environ), text=True)
    try:
        cqpn = int(child.stdout.readline())
        mine = RcPair(env.ctx)
        with open(f"/proc/{child.pid}/comm") as f:
            ccomm = f.read().strip()
        with open("/proc/self/comm") as f:
            comm = f.read().strip()
        text = ok(capsys, "stat", "qp", "show")
        heads = [line for line in text.splitlines() if line.startswith("link")]
        assert [h.split(" sent_pkts")[0] for h in heads] == [
            f"link rxe0/1 cntn 1 qp-type RC pid {child.pid} comm {ccomm}",
            f"link rxe0/1 cntn 2 qp-type RC pid {os.getpid()} comm {comm}"]
        assert [e["lqpn"] for e in parse_counters(text)] == [[cqpn], [mine.a.qp_num, mine.b.qp_num]]
        js = json.loads(ok(capsys, "-j", "stat", "qp", "show", "link", "rxe0/1", "pid", str(child.pid)))
        assert [(e["cntn"], e["pid"], e["comm"], e["lqpn"]) for e in js] == [(1, child.pid, ccomm, [cqpn])]
        assert list(js[0])[:7] == ["ifindex", "ifname", "port", "cntn", "qp-type", "pid", "comm"]
    finally:
        child.stdin.close()
        child.wait(10)
    # the child's death destroyed its QP, and with it counter 1
    assert [e["cntn"] for e in parse_counters(ok(capsys, "stat", "qp", "show"))] == [2]
    mine.close()


def test_bind_unbind_errors(env, capsys):
    from softrdma.verbs import qp
    p = RcPair(env.ctx)
    a, b = str(p.a.qp_num), str(p.b.qp_num)
    fresh = qp.QP(p.pd, qp.QPInitAttr(IBV_QPT_RC, scq=p.cqa, rcq=p.cqa))      # RESET: no port yet
    bind = ["stat", "qp", "bind", "link", "rxe0/1"]
    unbind = ["stat", "qp", "unbind", "link", "rxe0/1"]
    help_text = STAT_HELP.format("rdma")
    assert run(capsys, *bind, "lqpn", "999999") == (1, "", "error: No such file or directory\n")
    assert run(capsys, *bind, "lqpn", a, "cntn", "7") == (1, "", "error: No such file or directory\n")
    assert run(capsys, *bind, "lqpn", a) == (0, "", "")                                    # counter 1
    assert run(capsys, *bind, "lqpn", a) == (1, "", "error: Cannot allocate memory\n")      # alloc_and_bind NULL
    assert run(capsys, *bind, "lqpn", a, "cntn", "1") == (1, "", "error: Invalid argument\n")
    assert run(capsys, *bind, "lqpn", str(fresh.qp_num), "cntn", "1") == (1, "", "error: Invalid argument\n")
    assert run(capsys, *bind, "lqpn", str(fresh.qp_num)) == (0, "", "")                  # its own counter: 2
    assert run(capsys, *bind) == (1, help_text, "")
    assert run(capsys, *bind, "lqpn") == (1, "", "No filter data was supplied to filter option lqpn\n")
    assert run(capsys, *bind, "lqpn", f"{b}-{b}") == (1, "", "The parameter lqpn shouldn't include range\n")
    assert run(capsys, *bind, "cntn", "1", "lqpn", b) == (1, "", "")            # lqpn must come first
    assert run(capsys, *bind, "lqpn", b, "pid", "1") == (1, "", "")             # a filter name, not cntn
    assert run(capsys, *bind, "l", b, "c", "1") == (0, "", "")                  # prefixes, as strcmpx allows
    assert [e["lqpn"] for e in parse_counters(ok(capsys, "stat", "qp", "show"))] == [
        [int(a), int(b)], [fresh.qp_num]]
    assert run(capsys, *unbind, "cntn", "2", "lqpn", a) == (1, "", "error: Invalid argument\n")
    assert run(capsys, *unbind, "cntn", "1", "lqpn", "999999") == (1, "", "error: No such file or directory\n")
    assert run(capsys, *unbind, "cntn", "9") == (1, "", "")              # no such counter: nothing printed
    assert run(capsys, *unbind) == (1, help_text, "")
    assert run(capsys, *unbind, "lqpn", a) == (1, "", "")
    # the lqpn filter hides a counter when any of its QPs fails it (res_counter_line)
    assert [e["cntn"] for e in parse_counters(ok(capsys, "stat", "qp", "show", "link", "rxe0/1", "lqpn", a))] == []
    assert [e["cntn"] for e in parse_counters(ok(capsys, "stat", "qp", "show", "link", "rxe0/1",
                                                 "lqpn", f"{a},{b}"))] == [1]
    # STAT_SET and STAT_DEL need CAP_NET_ADMIN: EPERM without it
    drop = ["setpriv", "--bounding-set", "-net_admin", "--inh-caps", "-net_admin", sys.executable, "-m",
            "softrdma", "rdma"]
    for args in (bind + ["lqpn", b], unbind + ["cntn", "1", "lqpn", b],
                 ["stat", "qp", "set", "link", "rxe0/1", "auto", "off"]):
        r = subprocess.run(drop + args, capture_output=True, text=True, env=dict(os.environ), timeout=60)
        assert (r.returncode, r.stdout, r.stderr) == (1, "", "error: Operation not permitted\n"), args
    r = subprocess.run(drop + ["stat", "qp", "mode"], capture_output=True, text=True, env=dict(os.environ), timeout=60)
    assert (r.returncode, r.stdout) == (0, "link rxe0/1 mode qp auto off \n")          # reading needs nothing
    fresh.close()
    p.close()
