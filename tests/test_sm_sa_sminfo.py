"""softrdma.sm's SA queries, SMInfo election and agent, sans-IO (no ibsim needed)."""

from types import SimpleNamespace

from hypothesis import given, settings, strategies as st

from sm_helpers import fixture, load_net, roots
from softrdma.sm.agent import Agent
from softrdma.sm.guid2lid import Guid2Lid
from softrdma.sm.lid_mgr import assign_lids
from softrdma.sm.routing import compute
from softrdma.sm.sa import SubnetAdmin
from softrdma.sm.sminfo import HANDOVER, RemoteSm, SmInfoState
from softrdma.wire.mad import MgmtClass, Method, build_mad
from softrdma.mgmt.rmpp import RmppReceiver
from softrdma.wire.rmpp import RMPP_FLAG_ACTIVE, RMPP_FLAG_FIRST, RMPP_TYPE_DATA, parse_rmpp
from softrdma.sm.mcast import mft, mft_smps
from softrdma.wire.sa import (MCMEMBER_RECORD, MCR_COMP, NR_COMP_LID, PATH_RECORD, PR_COMP_DLID, PR_COMP_SLID,
                              SA_CLASS_VERSION, SA_STATUS_INSUFFICIENT_COMPONENTS, SA_STATUS_NO_RECORDS,
                              SA_STATUS_REQ_INVALID, SERVICE_RECORD, SaAttr, SaMethod, parse_sa)
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
    resent = [len(sa.tick(t)) for t in (0.5, 1.1, 2.0)]
    assert resent == [0, 0, 0] and not sa.transfers and sa.counts["rmpp_aborted"] == 1


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
    r = one(sa, sa_query(Method.GET, SaAttr.PATH_RECORD, PR_COMP_SGID | PR_COMP_DGID, rec))
    f = PATH_RECORD.decode(parse_sa(r)[1])
    assert r[4:6] == b"\0\0" and (f["SLID"], f["DLID"]) == (4, 12)
    r = one(sa, sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD,
                           PR_COMP_SGID | PR_COMP_DGID | PR_COMP_NUMBPATH, rec))
    assert len(r) == 56 + 2 * 64
    # LIDs asked for: that pair only
    rec = PATH_RECORD.encode(SLID=6, DLID=13)
    r = one(sa, sa_query(Method.SA_GET_TABLE, SaAttr.PATH_RECORD, PR_COMP_SLID | PR_COMP_DLID, rec))
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
    # opensm's polling timer: a poll per tick, counted; an answer resets the count;
    # the tick that finds more than polling_retry_number unanswered takes over
    assert me.poll_due(1) == "poll"
    me.poll_answered(RemoteSm(0x20, 9, SmState.MASTER))
    assert me.missed_polls == 0
    assert me.poll_due(1) == "poll" and me.poll_due(1) == "poll" and me.poll_due(1) == "takeover"


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


def mcmr(mgid, gid, join=1, qkey=0x1234):
    return bytes(MCMEMBER_RECORD.encode(MGID=mgid, PortGID=gid, QKey=qkey, PKey=0xFFFF, JoinState=join,
                                        Scope=2)).ljust(56, b"\0")


def sa_set(sa, method, attr, mask, rec, slid=1, sm_key=0, now=0.0):
    mad = sa_query(method, attr, mask, rec)
    mad[36:44] = sm_key.to_bytes(8, "big")
    (r, _), = sa.handle(mad, slid=slid, now=now)
    return int.from_bytes(r[4:6], "big"), r


def test_multicast_join_rules_and_leave():
    s = subnet()
    sa = SubnetAdmin(s, SmInfoState(guid=1, priority=0, sm_key=1))
    ca = [p for p in s.end_ports() if not p.node.is_switch]
    gids = [(0xFE80000000000000 << 64) | p.guid for p in ca]
    create = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "JoinState", "QKey", "TClass", "PKey", "FlowLabel",
                                       "SL"))
    # the IPoIB broadcast group exists from the start, as opensm's default partition makes it
    st, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.MCMEMBER_RECORD, 0, b"")
    assert MCMEMBER_RECORD.get(r[56:], "MLID") == 0xC000
    # a new group needs QKey, TClass, P_Key, FlowLabel and SL besides MGID, PortGID, JoinState
    st, _ = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, create & ~MCR_COMP["QKey"], mcmr(0, gids[0]))
    assert st == SA_STATUS_INSUFFICIENT_COMPONENTS
    st, r = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, create, mcmr(0, gids[0]))     # MGID assigned
    f = MCMEMBER_RECORD.decode(r[56:])
    assert st == 0 and f["MLID"] == 0xC001 and f["MGID"] >> 112 == 0xFF12 and f["PortGID"] == gids[0]
    mgid = f["MGID"]
    join = MCR_COMP["MGID"] | MCR_COMP["PortGID"] | MCR_COMP["JoinState"]
    st, _ = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, join, mcmr(mgid, gids[1]))
    assert st == 0 and sa.groups.version == 2
    st, _ = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, join, mcmr(mgid, 0xFE80 << 112 | 0x99))
    assert st == SA_STATUS_REQ_INVALID                      # not a port of this subnet
    # an untrusted query sees the group once, PortGID/JoinState zero; a trusted one every member
    st, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.MCMEMBER_RECORD, MCR_COMP["MGID"], mcmr(mgid, 0))
    assert MCMEMBER_RECORD.decode(r[56:])["PortGID"] == 0 and MCMEMBER_RECORD.get(r[56 + 56:], "MLID") == 0
    st, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.MCMEMBER_RECORD, MCR_COMP["MGID"], mcmr(mgid, 0), sm_key=1)
    assert {MCMEMBER_RECORD.get(r[56 + i * 56:], "PortGID") for i in range(2)} == set(gids[:2])
    # leaving: the last member takes the group (and its MLID) with it
    for g in gids[:2]:
        st, r = sa_set(sa, SaMethod.DELETE, SaAttr.MCMEMBER_RECORD, join, mcmr(mgid, g))
        assert st == 0 and r[3] == SaMethod.DELETE_RESP
    assert sorted(g.mlid for g in sa.groups.by_mgid.values()) == [0xC000]


def test_multicast_tree_spans_members_once():
    s = subnet()
    sa = SubnetAdmin(s)
    ca = [p for p in s.end_ports() if not p.node.is_switch]
    members = [ca[0], ca[20], ca[63]]
    create = sum(MCR_COMP[k] for k in ("MGID", "PortGID", "JoinState", "QKey", "TClass", "PKey", "FlowLabel",
                                       "SL"))
    for p in members:
        st, _ = sa_set(sa, Method.SET, SaAttr.MCMEMBER_RECORD, create,
                       mcmr(0xFF121234 << 96 | 1, (0xFE80000000000000 << 64) | p.guid))
        assert st == 0
    tables = mft(s, sa.groups)
    edges = set()
    for sw, t in tables.items():
        m = t.get(0xC001, 0)
        for num in range(1, 37):
            if m >> num & 1:
                far = sw.ports[num].remote
                if far.node.is_switch:
                    assert tables[far.node].get(0xC001, 0) >> far.num & 1       # both ends of a tree link
                    edges.add(frozenset((sw, far.node)))
                else:
                    assert far in members
    nodes = {n for e in edges for n in e}
    assert len(edges) == len(nodes) - 1                      # a tree
    # one Set per 16-port position that has a bit, none for what is programmed already
    used = {(sw, num // 16) for sw, t in tables.items() for num in range(37) if t.get(0xC001, 0) >> num & 1}
    assert len(mft_smps(s, tables, {})) == len(used)
    programmed = {sw.guid: t for sw, t in tables.items()}
    assert mft_smps(s, tables, programmed) == []
    assert len(mft_smps(s, tables, programmed, resend=True)) == len(used)       # after a heavy sweep
    # a group gone since (its last member's port left): its blocks are cleared
    stale = {g: {**t, 0xC002: 0b110} for g, t in programmed.items()}
    clears = mft_smps(s, tables, stale)
    assert len(clears) == len(tables)                   # block 0, position 0 of every switch
    for (guid, block, pos), m in clears:
        sw = next(x for x in tables if x.guid == guid)
        assert m[64 + 4:64 + 6] == bytes(2)                                        # 0xC002 cleared
        assert int.from_bytes(m[64 + 2:64 + 4], "big") == tables[sw].get(0xC001, 0) & 0xFFFF


def test_service_records_and_leases():
    s = subnet()
    sa = SubnetAdmin(s)
    rec = bytearray(SERVICE_RECORD.encode(ServiceID=0x42, ServiceGID=(0xFE80000000000000 << 64) | 7,
                                          ServiceP_Key=0xFFFF, ServiceLease=10))
    rec[48:52] = b"svc1"
    st, _ = sa_set(sa, Method.SET, SaAttr.SERVICE_RECORD, 1 | 2, bytes(rec))
    assert st == SA_STATUS_INSUFFICIENT_COMPONENTS           # ID, GID and P_Key name a service
    st, _ = sa_set(sa, Method.SET, SaAttr.SERVICE_RECORD, 1 | 2 | 4, bytes(rec), now=100.0)
    assert st == 0
    st, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.SERVICE_RECORD, 32, bytes(rec), now=105.0)   # by name
    assert r[56:56 + 8] == (0x42).to_bytes(8, "big")
    st, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.SERVICE_RECORD, 0, b"", now=111.0)            # lease over
    assert r[56:56 + 8] == bytes(8) and not sa.services


def test_port_info_records_by_capability_mask():
    s = subnet()
    sa = SubnetAdmin(s)
    sm = s.ports[s.sm_port_guid]
    pi = bytearray(64)
    pi[20:24] = (0x2 | 0x4).to_bytes(4, "big")               # IsSM | IsNoticeSupported
    sm.port_info = bytes(pi)
    rec = bytes(24) + (0x2).to_bytes(4, "big") + bytes(40)
    _, r = sa_set(sa, Method.SA_GET_TABLE, SaAttr.PORT_INFO_RECORD, 1 << 7, rec)
    assert r[56:58] == bytes(2)                               # exactly 0x2: none
    mad = sa_query(Method.SA_GET_TABLE, SaAttr.PORT_INFO_RECORD, 1 << 7, rec)
    mad[20:24] = (1 << 31).to_bytes(4, "big")                 # any of the bits (saquery -s)
    (r, _), = sa.handle(mad)
    assert int.from_bytes(r[56:58], "big") == sm.lid


@settings(max_examples=400, deadline=None)
@given(body=st.binary(min_size=0, max_size=300), method=st.sampled_from([0x01, 0x02, 0x12, 0x15, 0x81, 0x92, 7]),
       attr=st.sampled_from([0x01, 0x11, 0x12, 0x14, 0x15, 0x17, 0x18, 0x20, 0x31, 0x35, 0x38, 0xF3, 0x1234]),
       mask=st.integers(0, (1 << 64) - 1), rmpp=st.binary(min_size=12, max_size=12), sm_key=st.sampled_from([0, 1, 7]))
def test_any_sa_mad_gets_an_answer_or_nothing_never_an_exception(body, method, attr, mask, rmpp, sm_key):
    sa = SA_FUZZ[0]
    mad = sa_query(method, attr, mask & ((1 << 64) - 1), body[:200])
    mad[24:36] = rmpp
    mad[36:44] = sm_key.to_bytes(8, "big")
    mad = mad[:len(body) + 56] if len(body) < 200 else mad          # short MADs too
    for m, length in sa.handle(bytearray(mad), slid=5, sqp=1, now=1.0):
        assert len(m) == 256 and (length is None or 56 <= length <= 256)
    sa.tick(100.0)
    req = SimpleNamespace(mad=bytes(mad), slid=5, sqp=1, dqp=1)
    Agent(SmInfoState(guid=1), sa).handle(req, 1.0)


SA_FUZZ = []


def setup_module():
    SA_FUZZ.append(SubnetAdmin(subnet(), SmInfoState(guid=1, priority=0, sm_key=1)))
