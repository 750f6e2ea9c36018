"""softrdma.sm's SA queries, SMInfo election and agent, sans-IO (no ibsim needed)."""

from types import SimpleNamespace

from sm_helpers import fixture, load_net, roots
from softrdma.sm.agent import Agent
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.routing import compute
from softrdma.sm.sa import SubnetAdmin
from softrdma.sm.sminfo import HANDOVER, RemoteSm, SmInfoState
from softrdma.wire.mad import MgmtClass, Method, build_mad
from softrdma.wire.rmpp import RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_TYPE_DATA, RmppReceiver, parse_rmpp
from softrdma.wire.sa import (NR_COMP_LID, PATH_RECORD, PR_COMP_DLID, PR_COMP_SLID, SA_CLASS_VERSION,
                              SA_STATUS_NO_RECORDS, SaAttr, parse_sa)
from softrdma.wire.smp import SM_INFO, SmpAttr, SmState, build_smp


def subnet():
    s = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s, Guid2Lid())
    _, s.lfts = compute(s, "updn", roots("ft2_64"))
    for p in s.end_ports():
        p.port_info = bytes(64)
    return s


def sa_query(method, attr, mask, record=b""):
    mad = build_mad(MgmtClass.SUBN_ADM, SA_CLASS_VERSION, method, attr, tid=7)
    mad[48:56] = mask.to_bytes(8, "big")
    mad[56:56 + len(record)] = record
    return mad


def one(sa, mad):
    (r, length), = sa.handle(mad)
    return r if length is None else r[:length]


def test_node_record_by_lid_and_no_records():
    sa = SubnetAdmin(subnet())
    r = one(sa, sa_query(Method.GET, SaAttr.NODE_RECORD, NR_COMP_LID, (2).to_bytes(2, "big")))
    assert r[3] == Method.GET_RESP and r[4:6] == b"\0\0"
    hdr, data = parse_sa(r)
    assert int.from_bytes(data[0:2], "big") == 2 and bytes(data[44:51]) == b"leaf001"
    r = one(sa, sa_query(Method.GET, SaAttr.NODE_RECORD, NR_COMP_LID, (999).to_bytes(2, "big")))
    assert int.from_bytes(r[4:6], "big") == SA_STATUS_NO_RECORDS


def test_table_answer_is_an_rmpp_transfer():
    sa = SubnetAdmin(subnet())
    req = sa_query(Method.SA_GET_TABLE, SaAttr.NODE_RECORD, 0)
    (seg1, length), = sa.handle(bytearray(req), slid=5, sqp=1, now=0.0)
    assert seg1[3] == Method.SA_GET_TABLE_RESP
    h = parse_rmpp(seg1)
    assert (h.version, h.type, h.seg, h.flags) == (1, RMPP_TYPE_DATA, 1, RMPP_FLAG_ACTIVE | RMPP_FLAG_FIRST)
    # 70 NodeRecords of 112 bytes = 7840 bytes: 40 segments, the last 40 bytes full (pad 160)
    assert h.paylen == 40 * 220 - 160
    assert length == 56 + 112            # umad2sim's reader: the one whole record in segment 1
    # our end acknowledges: the SA sends the window, and so on until the last one
    r = RmppReceiver(window=16)
    ack = r.on_data(seg1)
    t = 0.0
    while r.result is None:
        segs = [m for m, _ in sa.handle(bytearray(ack), slid=5, sqp=1, now=t)]
        assert segs
        for m in segs:
            a = r.on_data(m)
            if a is not None:
                ack = a
    assert sa.handle(bytearray(ack), slid=5, now=t) == [] and not sa.transfers
    hdr, data = parse_sa(r.result[:256])
    assert len(r.result) == 56 + 70 * 112 and hdr.attr_offset == 14
    lids = [int.from_bytes(r.result[56 + i * 112:58 + i * 112], "big") for i in range(70)]
    assert lids == sorted(lids) and len(set(lids)) == 70


def test_a_reader_without_rmpp_leaves_nothing_behind():
    sa = SubnetAdmin(subnet())
    sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.NODE_RECORD, 0), slid=5, now=0.0)
    assert len(sa.transfers) == 1
    resent = [len(sa.tick(t)) for t in (0.1, 0.3, 0.6, 0.9, 1.2)]
    assert resent == [0, 1, 1, 1, 0] and not sa.transfers and sa.counts["rmpp_aborted"] == 1


def test_path_record_follows_the_lfts():
    s = subnet()
    sa = SubnetAdmin(s)
    rec = PATH_RECORD.encode(SLID=1, DLID=70)
    r = one(sa, sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
    f = PATH_RECORD.decode(parse_sa(r)[1])
    assert (f["SLID"], f["DLID"], f["PKey"], f["Reversible"]) == (1, 70, 0xFFFF, 1)
    assert f["DGID"] & 0xFFFFFFFFFFFFFFFF == 0x0002c904000003f1
    for sw in s.lfts.values():                          # no route: no path record
        sw[70] = 0xFF
    r = one(sa, sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
    assert len(r) == 56


def test_election():
    me = SmInfoState(guid=0x10, priority=3)
    assert me.decide([]) == SmState.MASTER
    me = SmInfoState(guid=0x10, priority=15)
    # a newcomer never preempts a master, whatever its priority
    assert me.decide([RemoteSm(0x20, 0, SmState.MASTER)]) == SmState.STANDBY
    me = SmInfoState(guid=0x10, priority=3)
    assert me.decide([RemoteSm(0x20, 3, SmState.STANDBY)]) == SmState.MASTER     # lower GUID wins
    assert me.decide([RemoteSm(0x08, 3, SmState.DISCOVERING)]) == SmState.STANDBY
    me.state = SmState.MASTER
    assert me.handover_target([RemoteSm(0x20, 9, SmState.STANDBY), RemoteSm(0x30, 12, SmState.STANDBY),
                               RemoteSm(0x40, 1, SmState.STANDBY)]).guid == 0x30
    me.state, me.master = SmState.STANDBY, RemoteSm(0x20, 9, SmState.MASTER)
    assert me.poll_result(None, 1) is None and me.poll_result(None, 1) == "takeover"


def test_agent_answers_sminfo_and_handover():
    st = SmInfoState(guid=0x0002c90400000001, priority=7, sm_key=1)
    st.state = SmState.STANDBY
    agent = Agent(st)
    req = SimpleNamespace(mad=bytes(build_smp(Method.GET, SmpAttr.SM_INFO, tid=5)), slid=9, sqp=0, dqp=0)
    replies, events = agent.handle(req)
    (dlid, dqp, sqp, mad, length), = replies
    f = SM_INFO.decode(mad[64:])
    assert dlid == 9 and mad[3] == Method.GET_RESP and not events
    assert (f["SmInfoGuid"], f["SmPriority"], f["SmState"], f["SmInfoKey"]) == \
        (0x0002c90400000001, 7, SmState.STANDBY, 1)
    req.mad = bytes(build_smp(Method.SET, SmpAttr.SM_INFO, HANDOVER, tid=6))
    replies, events = agent.handle(req)
    assert events == [("handover", None)] and st.state == SmState.DISCOVERING
