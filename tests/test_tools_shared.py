"""The helpers ibv_*_pingpong and perftest share: softrdma.tools.oob (the
out-of-band TCP connection) and softrdma.tools.verbs_setup (the QP state
steps with their exact masks, the address vector, teardown), as units: no
daemon, fake QPs."""

from __future__ import annotations

import socket
import threading

from softrdma.enums import (
    IBV_QP_ACCESS_FLAGS, IBV_QP_AV, IBV_QP_DEST_QPN, IBV_QP_MAX_DEST_RD_ATOMIC, IBV_QP_MAX_QP_RD_ATOMIC,
    IBV_QP_MIN_RNR_TIMER, IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX, IBV_QP_PORT, IBV_QP_QKEY, IBV_QP_RETRY_CNT,
    IBV_QP_RNR_RETRY, IBV_QP_RQ_PSN, IBV_QP_SQ_PSN, IBV_QP_STATE, IBV_QP_TIMEOUT, IBV_QPS_INIT, IBV_QPS_RTR,
    IBV_QPS_RTS,
)
from softrdma.tools import oob, verbs_setup as vs
from softrdma.verbs.errors import PyverbsError


# ---------------------------------------------------------------- oob
def test_listen_connect_accept_and_whole_messages():
    lsock = oob.listen_first(oob.resolve("127.0.0.1", 0, socket.AF_INET, passive=True), 0, socket.AF_INET)
    port = lsock.getsockname()[1]
    lsock.listen(1)                             # before the client connects (accept_one listens again)
    got = {}

    def serve():
        conn = oob.accept_one(lsock)
        got["msg"] = oob.read_msg(conn, 52)
        got["sent"] = oob.write_msg(conn, b"x" * 52)
        got["eof"] = oob.read_msg(conn, 5)
        conn.close()

    t = threading.Thread(target=serve)
    t.start()
    c = oob.connect_first(oob.resolve("127.0.0.1", port), "127.0.0.1", port)
    oob.set_nodelay(c)
    assert c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    assert oob.write_msg(c, b"a" * 52)
    assert oob.recv_msg(c, 52) == b"x" * 52
    c.send(b"do")                               # then EOF: a short message is no message
    c.close()
    t.join(10)
    assert got == {"msg": b"a" * 52, "sent": True, "eof": None}
    assert lsock.fileno() == -1                 # accept_one closed the listener


def test_connect_and_listen_failures_say_what_the_tools_say(capsys):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]                   # bound, not listening: connect is refused
    assert oob.connect_first(oob.resolve("127.0.0.1", port), "peer", port) is None
    assert capsys.readouterr().err == f"Couldn't connect to peer:{port}\n"
    assert oob.listen_first(oob.resolve("127.0.0.1", port, socket.AF_INET, passive=True), port,
                            socket.AF_INET6) is None       # no address of that family
    assert capsys.readouterr().err == f"Couldn't listen to port {port}\n"
    s.close()


# ---------------------------------------------------------------- verbs_setup
class FakeQP:
    def __init__(self, fail=False):
        self.calls = []
        self.fail = fail

    def modify(self, attr, mask):
        if self.fail:
            raise PyverbsError("modify failed")
        self.calls.append((attr.qp_state, mask, {k: getattr(attr, k) for k in (
            "pkey_index", "port_num", "qkey", "qp_access_flags", "path_mtu", "dest_qp_num", "rq_psn",
            "max_dest_rd_atomic", "min_rnr_timer", "sq_psn", "timeout", "retry_cnt", "rnr_retry",
            "max_rd_atomic")}))


BASE_INIT = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT


def test_init_masks():
    ud, rc = FakeQP(), FakeQP()
    vs.qp_to_init(ud, 1, qkey=0x11111111)
    vs.qp_to_init(rc, 2, 3, access=0)
    (st, mask, a), = ud.calls
    assert (st, mask, a["port_num"], a["pkey_index"], a["qkey"]) == (IBV_QPS_INIT, BASE_INIT | IBV_QP_QKEY, 1, 0,
                                                                       0x11111111)
    (st, mask, a), = rc.calls
    assert (st, mask, a["port_num"], a["pkey_index"], a["qp_access_flags"]) == \
        (IBV_QPS_INIT, BASE_INIT | IBV_QP_ACCESS_FLAGS, 2, 3, 0)


def test_rtr_rts_masks_per_transport():
    ah = vs.ah_attr(1, 0, 0)
    rc = FakeQP()
    a = vs.qp_to_rtr(rc, ah, 3, 0x12, 0x34, 1, 12)
    vs.qp_to_rts(rc, a, 0x56, 14, 7, 7, 1)
    assert [m for _, m, _ in rc.calls] == [
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC
        | IBV_QP_MIN_RNR_TIMER,
        IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC]
    assert [s for s, _, _ in rc.calls] == [IBV_QPS_RTR, IBV_QPS_RTS]
    rts = rc.calls[1][2]
    assert (rts["sq_psn"], rts["timeout"], rts["retry_cnt"], rts["rnr_retry"], rts["max_rd_atomic"]) == \
        (0x56, 14, 7, 7, 1)
    uc = FakeQP()
    vs.qp_to_rts(uc, vs.qp_to_rtr(uc, ah, 3, 1, 2), 3)
    assert [m for _, m, _ in uc.calls] == [
        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN, IBV_QP_STATE | IBV_QP_SQ_PSN]
    ud = FakeQP()
    vs.qp_to_rts(ud, vs.qp_to_rtr(ud), 9)
    assert [m for _, m, _ in ud.calls] == [IBV_QP_STATE, IBV_QP_STATE | IBV_QP_SQ_PSN]


def test_ah_attr_has_a_grh_only_with_a_gid():
    plain = vs.ah_attr(1, 0x10, 2)
    assert (plain.is_global, plain.port_num, plain.dlid, plain.sl) == (0, 1, 0x10, 2)
    gid = bytes(10) + b"\xff\xff" + bytes([10, 0, 0, 1])
    g = vs.ah_attr(1, 0, 0, gid, 3, 0xFF, 5, 0x12345)
    assert g.is_global == 1 and g.gr.dgid.raw == gid
    assert (g.gr.sgid_index, g.gr.hop_limit, g.gr.traffic_class, g.gr.flow_label) == (3, 0xFF, 5, 0x12345)


class Closable:
    def __init__(self, log, name, fail=False):
        self.log, self.name, self.fail = log, name, fail

    def close(self):
        self.log.append(self.name)
        if self.fail:
            raise PyverbsError("busy")


def test_destroy_stops_or_keeps_going():
    log, said = [], []
    steps = [(Closable(log, "qp"), "no qp"), (None, "skipped"), (Closable(log, "cq", True), "no cq"),
             (Closable(log, "pd"), "no pd")]
    assert vs.destroy(steps, said.append) is False
    assert (log, said) == (["qp", "cq"], ["no cq"])
    log.clear(), said.clear()
    assert vs.destroy(steps, said.append, keep_going=True) is False
    assert (log, said) == (["qp", "cq", "pd"], ["no cq"])
    log.clear()
    vs.close_quietly(None, Closable(log, "a", True), Closable(log, "b"))
    assert log == ["a", "b"]
