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
from softrdma.wire.sa import (NR_COMP_LID, PATH_RECORD, PR_COMP_DLID, PR_COMP_SLID, SA_CLASS_VERSION,
                              SA_STATUS_NO_RECORDS, SaAttr, parse_sa)
from softrdma.wire.smp import SM_INFO, SmpAttr, SmState, build_smp


def subnet(lmc=0):
    s = load_net(fixture("ft2_64.net.xz"))
    assign_lids(s, Guid2Lid(), lmc)
    _, s.lfts = compute(s, "updn", roots("ft2_64"))
    for p in s.end_ports():
        p.port_info = bytes(64)
    return s


def sa_query(method, attr, mask, record=b""):
    mad = build_mad(MgmtClass.SUBN_ADM, SA_CLASS_VERSION, method, attr, tid=7)
    mad[48:56] = mask.to_bytes(8, "big")
    mad[56:56 + len(record)] = record
    return mad


def test_node_record_by_lid_and_no_records():
    sa = SubnetAdmin(subnet())
    r = sa.handle(sa_query(Method.GET, SaAttr.NODE_RECORD, NR_COMP_LID, (2).to_bytes(2, "big")))
    assert r[3] == Method.GET_RESP and r[4:6] == b"\0\0"
    hdr, data = parse_sa(r)
    assert int.from_bytes(data[0:2], "big") == 2 and bytes(data[44:51]) == b"leaf001"
    r = sa.handle(sa_query(Method.GET, SaAttr.NODE_RECORD, NR_COMP_LID, (999).to_bytes(2, "big")))
    assert int.from_bytes(r[4:6], "big") == SA_STATUS_NO_RECORDS


def test_table_answer_is_one_rmpp_segment_of_what_fits():
    sa = SubnetAdmin(subnet())
    r = sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.NODE_RECORD, 0))
    assert r[3] == Method.SA_GET_TABLE_RESP
    assert len(r) == 56 + 112 and sa.truncated == 1     # 70 NodeRecords, one fits
    assert r[24] == 1 and r[26] & 7 == 7                 # RMPP v1, ACTIVE|FIRST|LAST


def test_path_record_follows_the_lfts():
    s = subnet()
    sa = SubnetAdmin(s)
    rec = PATH_RECORD.encode(SLID=1, DLID=70)
    r = sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
    f = PATH_RECORD.decode(parse_sa(r)[1])
    assert (f["SLID"], f["DLID"], f["PKey"], f["Reversible"]) == (1, 70, 0xFFFF, 1)
    assert f["DGID"] & 0xFFFFFFFFFFFFFFFF == 0x0002c904000003f1
    for sw in s.lfts.values():                          # no route: no path record
        sw[70] = 0xFF
    r = sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
    assert len(r) == 56


def test_lmc_path_records_as_opensm_orders_them():
    # LMC 2 on both ends: 16 LID pairs; base+i <-> base+i first (preference 0), then the
    # others source-major (preference 2), as pr_rcv_get_port_pair_paths; a Get gives one
    from softrdma.wire.sa import PR_COMP_DGID, PR_COMP_NUMBPATH, PR_COMP_SGID
    s = subnet(2)
    sa = SubnetAdmin(s)
    src, dst = s.ports[0x0002c90400000001], s.ports[0x0002c90400000101]
    assert (src.lid, dst.lid) == (4, 12)
    got = [(PATH_RECORD.get(r, "SLID"), PATH_RECORD.get(r, "DLID"), PATH_RECORD.get(r, "Preference"))
           for r in sa.pair_paths(src, dst, None, None, None)]
    want = [(4 + i, 12 + i, 0) for i in range(4)] + \
        [(4 + a, 12 + b, 2) for a in range(4) for b in range(4) if a != b]
    assert got == want
    gid = (0xFE80 << 112)
    rec = PATH_RECORD.encode(SGID=gid | src.guid, DGID=gid | dst.guid, NumbPath=2)
    r = sa.handle(sa_query(Method.GET, SaAttr.PATH_RECORD, PR_COMP_SGID | PR_COMP_DGID, rec))
    f = PATH_RECORD.decode(parse_sa(r)[1])
    assert r[4:6] == b"\0\0" and (f["SLID"], f["DLID"]) == (4, 12)
    r = sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD,
                           PR_COMP_SGID | PR_COMP_DGID | PR_COMP_NUMBPATH, rec))
    assert len(r) == 56 + 2 * 64
    # LIDs asked for: that pair only
    rec = PATH_RECORD.encode(SLID=6, DLID=13)
    r = sa.handle(sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
    f = PATH_RECORD.decode(parse_sa(r)[1])
    assert len(r) == 56 + 64 and (f["SLID"], f["DLID"], f["Preference"]) == (6, 13, 0)


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
    (dlid, dqp, sqp, mad), = replies
    f = SM_INFO.decode(mad[64:])
    assert dlid == 9 and mad[3] == Method.GET_RESP and not events
    assert (f["SmInfoGuid"], f["SmPriority"], f["SmState"], f["SmInfoKey"]) == \
        (0x0002c90400000001, 7, SmState.STANDBY, 1)
    req.mad = bytes(build_smp(Method.SET, SmpAttr.SM_INFO, HANDOVER, tid=6))
    replies, events = agent.handle(req)
    assert events == [("handover", None)] and st.state == SmState.DISCOVERING
