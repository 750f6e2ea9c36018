"""QoS in softrdma's SM: opensm.conf's qos_* options, SL2VL and VLArbitration tables as opensm sets them.

* The option strings as opensm's parser reads them (``vl:weight,...``,
  ``vl,...``, missing entries zero, VLs modulo 15), the fallbacks from a
  ``qos_ca_``/``qos_sw0_``/``qos_swe_``/``qos_rtr_`` option to the plain one
  to opensm's defaults, and the range checks of osm_subn_verify_config.
* End to end on the real ibsim, ``-Q`` with opensm's defaults and with an
  opensm.conf setting every kind of option: the real ``smpquery sl2vl`` and
  ``smpquery vlarb`` print the same on every port (64 CAs, every switch port
  and port 0) after softrdma's SM as after the real opensm; without ``-Q``
  neither SM touches the tables.
"""

import pytest

from sm_helpers import EchoSweep, IbsimFabric, every_port, need_ibsim, real_and_ours, saquery_transcript, wait_log
from softrdma.sm import main as sm_main
from softrdma.sm.qos import (DEFAULT_SL2VL, QosOptions, build_config, parse_sl2vl, parse_vlarb, verify)

QOS_CONF = """qos_max_vls 8
qos_high_limit 10
qos_vlarb_high 0:10,1:20,2:30
qos_vlarb_low 0:1,1:2,2:3,3:4,4:5,5:6,6:7,7:8,8:9,9:10,10:11,11:12,12:13,13:14,14:15
qos_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15
qos_ca_sl2vl 3,2,1,0,3,2,1,0,3,2,1,0,3,2,1,0
qos_ca_high_limit 7
qos_swe_vlarb_low 3:100,2:50
qos_sw0_vlarb_high 1:1
"""


def test_option_strings_as_opensm_parses_them():
    assert parse_vlarb("0:4,1:0,16:7")[:4] == [(0, 4), (1, 0), (1, 7), (0, 0)]     # 16 % 15, then zeros
    assert len(parse_vlarb("")) == 64
    assert parse_sl2vl(DEFAULT_SL2VL) == list(range(15)) + [7]
    assert parse_sl2vl("1,2") == [1, 2] + [0] * 14
    assert parse_sl2vl("17,0x1f")[:2] == [1, 15]            # (17 << 4) | 0xf, one byte: VLs 1 and 15


def test_prefixed_options_fall_back_to_the_plain_ones_then_the_defaults():
    base = QosOptions(high_limit=10, sl2vl="1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1")
    ca = QosOptions(high_limit=7, vlarb_low="3:100")
    c = build_config(ca, base)
    assert c.vl_high_limit == 7 and c.sl2vl == [1] * 16 and c.vlarb_low[:2] == [(3, 100), (0, 0)]
    assert c.vlarb_high[:2] == [(0, 4), (1, 0)] and c.max_vls == 15
    sw = build_config(QosOptions(), QosOptions())
    assert sw.vl_high_limit == 0 and sw.vlarb_low[:3] == [(0, 0), (1, 4), (2, 4)]


def test_out_of_range_values_fall_back(capsys):
    opts = {"": QosOptions(max_vls=16, high_limit=300), "ca_": QosOptions(max_vls=0)}
    verify(opts, print)
    out = capsys.readouterr().out
    assert " Invalid Cached Option: qos_max_vls=16: Using Default = 15" in out
    assert " Invalid Cached Option: qos_high_limit=300: Using Default: 0" in out
    assert opts[""].max_vls == 0 and opts[""].high_limit == -1


def test_config_keys_are_read_and_written(tmp_path):
    (tmp_path / "opensm.conf").write_text(QOS_CONF + "qos TRUE\n")
    a = sm_main.build_parser().parse_args(["-F", str(tmp_path / "opensm.conf")])
    s = sm_main.settings(a)
    assert s["qos"] and s["qos_options"]["ca_"].sl2vl.startswith("3,2,1,0")
    assert s["qos_options"]["swe_"].vlarb_low == "3:100,2:50" and s["qos_options"][""].high_limit == 10
    assert sm_main.main(["-F", str(tmp_path / "opensm.conf"), "-c", str(tmp_path / "out.conf")]) == 0
    text = (tmp_path / "out.conf").read_text()
    assert "qos TRUE\n" in text and "qos_ca_sl2vl 3,2,1,0," in text and "qos_rtr_vlarb_low (null)\n" in text


def swept(tmp_path, which, *args):
    tmp_path.mkdir()
    fab = IbsimFabric(tmp_path)
    try:
        conf = tmp_path / "qos.conf"
        conf.write_text(QOS_CONF)
        args = [str(conf) if a == "QOS.CONF" else a for a in args]
        sm = fab.real_sm("sm", "host0001", "-o", *args) if which == "real" else \
            fab.our_sm("sm", "host0001", "-o", *args)
        assert sm.wait(120) == 0 or which == "real", sm.log.read_text()[-3000:]
        return every_port(fab, "sl2vl") + every_port(fab, "vlarb")
    finally:
        fab.close()


@pytest.fixture(scope="module")
def untouched(tmp_path_factory):
    """Every port's tables after softrdma's SM without -Q: the same for every -Q case, read once."""
    return swept(tmp_path_factory.mktemp("qos") / "untouched", "ours")


@need_ibsim()
@pytest.mark.slow
@pytest.mark.parametrize("args", [("-Q",), ("-Q", "-F", "QOS.CONF"), ("-F", "QOS.CONF")],
                         ids=["defaults", "conf", "no-Q"])
def test_sl2vl_and_vlarb_identical_to_opensms_on_every_port(tmp_path, args, request):
    real = swept(tmp_path / "real", "real", *args)
    ours = swept(tmp_path / "ours", "ours", *args)
    assert real.count("== ") == 2 * (64 + 6 * 37)
    assert ours == real
    if "-Q" in args:
        assert request.getfixturevalue("untouched") != real     # the test sees what -Q changes
    if "conf" in str(args) and "-Q" in args:
        assert "ports: in  0, out  0: | 3| 2| 1| 0|" in ours and "|0x64|0x32|" in ours


def test_a_second_sweep_sends_only_what_changed():
    from sm_helpers import fixture, load_net
    from softrdma.sm.qos import QosSetup
    from softrdma.wire.smp import PORT_INFO
    sub = load_net(fixture("ft2_64.net.xz"))
    for node in sub.nodes.values():
        for p in node.ports.values():
            linked = p.remote is not None or p.num == 0
            p.port_info = bytes(PORT_INFO.encode(LinkState=4 if linked else 1, OperVLs=4, VLCap=4, VLArbLowCap=8,
                                                 VLArbHighCap=8, CapMask=0x40))
    qos = QosSetup(True)
    sweep = EchoSweep(sub)
    qos.phases(sweep)[0]()
    # 64 CAs: low, high, SL2VL; every linked switch port: low, high and an SL2VL per input port
    linked = sum(1 for n in sub.nodes.values() if n.is_switch for num, p in n.ports.items() if num and p.remote)
    assert len(sweep.sent) == 64 * 3 + linked * (2 + 37)
    sweep.sent.clear()
    qos.phases(sweep)[0]()
    assert sweep.sent == []
    qos.opts["ca_"].sl2vl = "1,1"
    qos.phases(sweep)[0]()
    assert len(sweep.sent) == 64


def sa_records(tmp_path, which):
    """The real saquery's SL2VLTableRecords and VLArbitrationTableRecords after -Q."""
    def queries(lid):
        h, sw = lid["host0002"], lid["leaf001"]
        return [("host0002", q) for q in (
            ("SL2VL", h), ("SL2VL", f"{sw}/3/2"), ("SL2VL", f"{sw}/0/30"), ("SL2VL", f"{sw}/2/0"),
            ("VLAR", f"{h}//1"), ("VLAR", f"{h}//3"), ("VLAR", f"{sw}/2/1"), ("VLAR", f"{sw}/0/1"),
            ("VLAR", f"{sw}/30/3"), ("VLAR", f"{sw}/2/4"))]
    return saquery_transcript(tmp_path, which, ["-s", "1", "-Q"], {}, queries,
                              (("SL2VL", "{host0002}"), "VL: 0| 1| 2|"))



POLICY = """# QoS policy
qos-ulps
    default                                   : 5
    any, target-port-guid 0x0002c90400000021  : 7
    ipoib                                     : 6
    any, pkey 0x7fff                          : 3
    any, service-id 0x1234                    : 2
    sdp, port-num 16                          : 4
end-qos-ulps
"""


class Port:
    """What a policy asks of a port: its GUID, node (description, type) and number."""

    def __init__(self, guid, desc="", type_=1, num=1):
        self.guid, self.num = guid, num
        self.node = type("Node", (), {"desc": desc, "type": type_})()


NO_SUBNET = type("Subnet", (), {"partitions": None, "sm_port_guid": 0})()


def sl(policy, src, dst, mask=0, **f):
    lv = policy.level_for(Port(src), Port(dst), mask, dict({"ServiceID": 0, "PKey": 0, "QosClass": 0}, **f),
                          NO_SUBNET)
    return lv.sl


def test_qos_ulps_as_opensms_match_rules():
    from softrdma.sm.qos_policy import parse
    p = parse(POLICY + "qos-ulps\n rds : 1\n iser, port-num 900-901 : 9\n srp, target-port-guid 0x10-0x20 : 8\n"
                       " any, source-target-port-guid 0x5 : 11\nend-qos-ulps\n")
    assert p.default_sl == 5
    assert sl(p, 1, 0x0002c90400000021) == 7
    assert sl(p, 1, 2, 1 << 13, PKey=0xFFFF) == 6            # IPoIB: the default partition
    assert sl(p, 1, 2, 0, PKey=0xFFFF) == 5                  # P_Key not in the mask: no match
    assert sl(p, 1, 2, 3, ServiceID=0x1234) == 2
    assert sl(p, 1, 2, 3, ServiceID=0x10010) == 4            # SDP: 0x10000 + port
    assert sl(p, 1, 2, 3, ServiceID=0x1060000 + 0x48CA) == 1
    assert sl(p, 1, 2, 3, ServiceID=0x1060000 + 901) == 9
    assert sl(p, 1, 0x18) == 8
    assert sl(p, 5, 5) == 11 and sl(p, 5, 6) == 5


def test_the_full_format_port_groups_levels_and_match_rules():
    from sm_helpers import DATA
    from softrdma.sm.qos_policy import parse
    import os
    p = parse(open(os.path.join(os.path.dirname(DATA), "qos-policy-full.conf")).read())
    assert set(p.levels) == {"default", "storage", "fast"} and set(p.groups) == {"Storage", "Hosts12", "Everybody"}
    lv = p.level_for(Port(0x11, "host0002"), Port(0x0002c90400000041), 0, {"QosClass": 0}, NO_SUBNET)
    assert (lv.name, lv.sl, lv.mtu_limit, lv.rate_limit, lv.pkt_life) == ("storage", 4, 3, 3, 14)
    assert sl(p, 1, 2) == 0 and sl(p, 1, 2, 1 << 14, QosClass=8) == 2
    assert sl(p, 1, 2, 3, ServiceID=0x150) == 2 and sl(p, 1, 2, 3, ServiceID=0x300) == 7   # the ULPs after


@pytest.mark.parametrize("text, what", [
    ("qos-ulps\n default : 16\nend-qos-ulps\n", "ERR AC05: Syntax error (line 2:14): illegal SL value"),
    ("qos-ulps\n bogus stuff : 1\nend-qos-ulps\n", "(line 2:3): syntax error"),
    ("qos-levels\n qos-level\n name: x\n colour: red\n end-qos-level\nend-qos-levels\n", "(line 4:9): syntax error"),
    ("qos-ulps\n default : 1\n", "ERR AC05: Syntax error (line 3:1): syntax error"),
    ("qos-ulps\n default : 1\n ipoib, pkey 0x12 : 2\nend-qos-ulps\n",
     "(line 3:20): IPoIB partition, pkey 0x0012 - partition doesn't exist"),
    ("qos-ulps\n sdp : 1\nend-qos-ulps\n", "ERR AC10: Default qos-level (default) not defined."),
    ("port-groups\n port-group\n use: x\n end-port-group\nend-port-groups\n", "(line 4:16): port-group validation failed - no port group name specified"),
    ("qos-levels\n qos-level\n name: default\n sl: 1\n end-qos-level\nend-qos-levels\nqos-match-rules\n"
     " qos-match-rule\n qos-level-name: nope\n end-qos-match-rule\nend-qos-match-rules\n",
     "ERR AC11: qos-match-rule num 1: qos-level 'nope' not found"),
    ("qos-levels\n qos-level\n name: default\n sl: 0\n end-qos-level\nend-qos-levels\nqos-match-rules\n"
     " qos-match-rule\n qos-level-name: default\n source: Nobody\n end-qos-match-rule\nend-qos-match-rules\n",
     "ERR AC12: qos-match-rule num 1: source port-group 'Nobody' not found"),
])
def test_a_policy_that_does_not_parse_is_refused(tmp_path, text, what):
    from softrdma.sm import log as L
    from softrdma.sm.qos_policy import load
    (tmp_path / "p.conf").write_text(text)
    log = L.Log(str(tmp_path / "osm.log"))
    from softrdma.sm.prtn_config import Partitions
    assert load(str(tmp_path / "p.conf"), log, Partitions()) is None
    log.close()
    out = (tmp_path / "osm.log").read_text()
    assert what in out
    assert "ERR AC03: Failed parsing QoS policy file" in out or "ERR AC04: Error(s) in QoS policy file" in out


def policy_paths(tmp_path, which):
    """The real saquery's PathRecords under POLICY."""
    def queries(lid):
        a, b, c = lid["host0002"], lid["host0003"], lid["host0004"]
        return [("host0002", q) for q in (
            ("--src-to-dst", f"{a}:{b}"), ("--src-to-dst", f"{a}:{c}"),
            ("--pkey", "0x7fff", "--src-to-dst", f"{a}:{c}"), ("--service_id", "0x1234", "--src-to-dst", f"{a}:{c}"),
            ("--sl", "1", "--src-to-dst", f"{a}:{c}"), ("--sl", "5", "--src-to-dst", f"{a}:{c}"),
            ("--service_id", "0x10010", "--src-to-dst", f"{a}:{c}"))]
    return saquery_transcript(tmp_path, which, ["-s", "1", "-Q", "-Y", "{tmp}/qos-policy.conf"],
                              {"qos-policy.conf": POLICY}, queries,
                              (("--src-to-dst", "{host0002}:{host0003}"), "sl......................0x7"))


def policy_full_paths(tmp_path, which):
    """The real saquery's PathRecords under the full-format policy (port groups, levels, rules)."""
    from sm_helpers import DATA
    import os
    text = open(os.path.join(os.path.dirname(DATA), "qos-policy-full.conf")).read()

    def queries(lid):
        a, b, c, d = lid["host0002"], lid["host0003"], lid["host0004"], lid["host0010"]
        return [("host0002", q) for q in (
            ("--src-to-dst", f"{a}:{b}"), ("--src-to-dst", f"{a}:{c}"), ("--src-to-dst", f"{a}:{d}"),
            ("-Q", "8", "--src-to-dst", f"{a}:{d}"), ("--service_id", "0x150", "--src-to-dst", f"{a}:{d}"),
            ("--service_id", "0x300", "--src-to-dst", f"{a}:{d}"), ("--src-to-dst", f"{b}:{a}"))]
    return saquery_transcript(tmp_path, which, ["-s", "1", "-Q", "-Y", "{tmp}/qos-policy.conf"],
                              {"qos-policy.conf": text}, queries,
                              (("--src-to-dst", "{host0002}:{host0003}"), "sl......................0x4"))


@need_ibsim()
@pytest.mark.slow
@pytest.mark.parametrize("run, marks", [
    (sa_records, ["SL2VLTableRecord dump", "VLArbTableRecord dump"]),
    (policy_paths, ["sl......................0x4", "sl......................0x6"]),
    (policy_full_paths, ["mtu.....................0x83", "pkt_life................0x8E"]),
], ids=["sl2vl-vlarb-records", "policy-path-sl", "full-policy"])
def test_sa_answers_as_opensms(tmp_path, run, marks):
    """SL2VLTableRecords and VLArbitrationTableRecords after -Q; PathRecord SLs under POLICY."""
    real, ours = real_and_ours(tmp_path, run)
    assert all(m in real for m in marks)
    assert ours == real
