"""QoS details of softrdma's SM, each as opensm 3.3.23 has it.

* use_optimized_slvl (osm_qos.c's optimized SL2VL programming): on switches
  whose SwitchInfo offers OptimizedSLtoVLMappingProgramming, one Set for all
  input and output ports and one per output port whose OperationalVLs differ
  from most ports' -- the same tables as one Set per (input, output) pair,
  with far fewer SMPs; switches without the capability (ibsim's) get their
  tables pair by pair, and the real ``smpquery sl2vl`` prints the same after
  the real opensm with the option on as after ours.
* QoS policy errors: the same policies given to the real opensm and to
  softrdma's parser give the same stderr line and log lines -- opensm's
  yyerror text at its line and column (after the token bison had read).
* path-bits: read into the qos-level and, as in opensm, used by nothing:
  with LMC 1 the real saquery gets the same PathRecords for every LID pair
  of two ports after either SM.
"""

import pytest

from sm_helpers import (EchoSweep, IbsimFabric, fixture, ibnetdiscover_lids, load_net, need_ibsim, real_and_ours,
                        saquery_transcript)
from softrdma.sm import log as L
from softrdma.sm import main as sm_main
from softrdma.sm.qos import QosSetup
from softrdma.wire.smp import PORT_INFO, SWITCH_INFO, SmpAttr


def _fabric(opt_sl2vl: int):
    """ft2_64 as discovery leaves it; CA-facing switch ports with 2 operational VLs, the
    others 4; switches offering OptimizedSLtoVLMappingProgramming (``opt_sl2vl``) or not."""
    sub = load_net(fixture("ft2_64.net.xz"))
    for node in sub.nodes.values():
        if node.is_switch:
            node.switch_info = bytes(SWITCH_INFO.encode(OptSLtoVLMapping=opt_sl2vl))
        for p in node.ports.values():
            linked = p.remote is not None or p.num == 0
            to_ca = node.is_switch and p.remote is not None and not p.remote.node.is_switch
            p.port_info = bytes(PORT_INFO.encode(LinkState=4 if linked else 1, OperVLs=2 if to_ca else 4, VLCap=4,
                                                 VLArbLowCap=8, VLArbHighCap=8, CapMask=0x40))
    return sub


def _sl2vl_sets(sweep):
    return [s for s in sweep.sent if int.from_bytes(s[16:18], "big") == SmpAttr.SL_TO_VL_TABLE]


def _programmed(optimized: bool, opt_sl2vl: int = 1):
    sub = _fabric(opt_sl2vl)
    qos = QosSetup(True, optimized=optimized)
    qos.opts[""].sl2vl = "0,1,2,3,0,1,2,3,0,1,2,3,0,1,2,15"
    sweep = EchoSweep(sub)
    qos.phases(sweep)[0]()
    tables = {k: {i: t for i, t in v.sl2vl.items() if i or not sub.nodes[k[0]].is_switch}
              for k, v in qos.ports.items()}       # input port 0 of a switch: only the pair-by-pair path sets it
    return sub, qos, sweep, tables


def test_optimized_sl2vl_same_tables_fewer_smps():
    sub, _, plain, plain_tables = _programmed(False)
    _, qos, opt, opt_tables = _programmed(True)
    # the same tables on every port that is up (0x30000 also names the down ones, as opensm records it)
    assert {k: v for k, v in opt_tables.items() if k in plain_tables} == plain_tables
    switches = [n for n in sub.nodes.values() if n.is_switch]
    ca_ports = sum(1 for n in switches for p in n.ports.values() if p.remote and not p.remote.node.is_switch)
    # one 0x30000 Set per switch, one 0x20000|out per port whose OperVLs (2) are not the most common (4)
    switch_mods = [m for m in (int.from_bytes(s[20:24], "big") for s in _sl2vl_sets(opt)) if m]
    assert sorted(m for m in switch_mods if m == 0x30000) == [0x30000] * len(switches)
    assert len([m for m in switch_mods if m & 0x20000 and not m & 0x10000]) == ca_ports
    assert len(_sl2vl_sets(opt)) < len(_sl2vl_sets(plain)) // 10
    # a 2-VL port's table is masked to VL 0..1 (VL15 stays)
    leaf = next(n for n in switches if any(p.remote and not p.remote.node.is_switch for p in n.ports.values()))
    out = next(num for num, p in leaf.ports.items() if p.remote and not p.remote.node.is_switch)
    assert opt_tables[(leaf.guid, out)][1] == [0, 1, 0, 1] * 3 + [0, 1, 0, 15]
    # nothing changed: nothing sent
    opt.sent.clear()
    qos.phases(opt)[0]()
    assert opt.sent == []


def test_without_the_capability_or_the_option_tables_go_pair_by_pair():
    _, _, plain, _ = _programmed(False)
    _, _, nocap, _ = _programmed(True, opt_sl2vl=0)
    assert [s[20:24] for s in _sl2vl_sets(nocap)] == [s[20:24] for s in _sl2vl_sets(plain)]


def test_the_option_is_read_and_written(tmp_path):
    (tmp_path / "opensm.conf").write_text("use_optimized_slvl TRUE\n")
    assert sm_main.settings(sm_main.build_parser().parse_args(["-F", str(tmp_path / "opensm.conf")]))[
        "use_optimized_slvl"] is True
    assert sm_main.settings(sm_main.build_parser().parse_args([]))["use_optimized_slvl"] is False
    assert sm_main.main(["-F", str(tmp_path / "opensm.conf"), "-c", str(tmp_path / "out.conf")]) == 0
    assert "use_optimized_slvl TRUE\n" in (tmp_path / "out.conf").read_text()


def sl2vl_with_the_option(tmp_path, which):
    """smpquery sl2vl of a CA and of leaf001's CA-facing and spine-facing ports after -Q with
    use_optimized_slvl TRUE (ibsim's switches do not offer the optimized programming)."""
    tmp_path.mkdir()
    conf = tmp_path / "opensm.conf"
    conf.write_text("sminfo_polling_timeout 300\npolling_retry_number 1\nuse_optimized_slvl TRUE\n"
                    "qos_sl2vl 0,1,2,3,4,5,6,7,7,6,5,4,3,2,1,15\n")
    fab = IbsimFabric(tmp_path)
    try:
        sm = fab.real_sm("sm", "host0001", "-o", "-Q", "-F", str(conf)) if which == "real" else \
            fab.our_sm("sm", "host0001", "-o", "-Q", "-F", str(conf))
        assert sm.wait(120) == 0 or which == "real", sm.log.read_text()[-3000:]
        lids = ibnetdiscover_lids(fab.diag("ibnetdiscover"))
        return "".join(f"== {n} {num}\n" + fab.diag("smpquery", "sl2vl", str(lids[n]), str(num))
                       for n, num in (("host0003", 1), ("leaf001", 2), ("leaf001", 17)))
    finally:
        fab.close()


@need_ibsim()
@pytest.mark.slow
def test_optimized_option_on_ibsim_as_opensm(tmp_path):
    real, ours = real_and_ours(tmp_path, sl2vl_with_the_option)
    assert "| 7| 6| 5| 4| 3| 2| 1|15|" in real
    assert ours == real


# -- QoS policy errors: opensm's message, line and column ------------------------------------------

BAD_POLICIES = [
    "qos-ulps\n default : 16\nend-qos-ulps\n",                                   # after the number
    "qos-ulps\n bogus stuff : 1\nend-qos-ulps\n",                                # after the token that does not fit
    "qos-levels\n qos-level\n name: x\n colour: red\n end-qos-level\nend-qos-levels\n",   # name's text goes on
    "qos-ulps\n default : 1\n",                                                  # at the end of the file
    "qos-ulps\n default : 1\n ipoib, pkey 0x12 : 2\nend-qos-ulps\n",             # after the ':'
    "port-groups\n port-group\n use: x\n end-port-group\nend-port-groups\n",     # after the end keyword
    "qos-levels\n qos-level\n name: a\n name: b\n sl: 1\n end-qos-level\nend-qos-levels\n",   # a token ahead
    "qos-levels\n\tqos-level\n\t\tname: a\n\t\tsl: 1\n\t\tmtu-limit: 1x\n\tend-qos-level\nend-qos-levels\n",
    "qos-levels\n qos-level\n name: default\n sl: 2\n rate-limit: 1\n end-qos-level\nend-qos-levels\n",
    "qos-match-rules\n qos-match-rule\n use: x\n end-qos-match-rule\nend-qos-match-rules\n",
    "port-groups\n port-group\n name: g\n node-type: CA, BOGUS\n end-port-group\nend-port-groups\n",
    "port-groups\n port-group\n name: g\n port-name: host0002 P1\n end-port-group\nend-port-groups\n",
    "port-groups\n port-group\n name: g\n port-name: nosuch/P2, host0002/P1\n end-port-group\nend-port-groups\n",
    "port-groups\n port-group\n name: \"my group\"\n use: a, b: c-1 * 2\n port-guid: 0x10-0x20, 5 node-type: ALL\n"
    " end-port-group\nend-port-groups\nqos-ulps\n default : 3\nend-qos-ulps\nport-groups\n end-port-groups\n",
    "qos-levels\nend-qos-levels\nqos-ulps\n DEFAULT : 0x3\n IPoIB : 4\n rds, port-num 1 : 020\n iser : 2 # x\n"
    "end-qos-ulps",
    "qos-setup\n sl2vl-tables\n  sl2vl-scope\n   group: A\n   sl2vl-table: 0,1,2\n  end-sl2vl-scope\n"
    " end-sl2vl-tables\nend-qos-setup\n",
    "qos-setup\n vlarb-tables\n  vlarb-scope\n   vlarb-high: 0:255,1:127\n  end-vlarb-scope\n end-vlarb-tables\n"
    "end-qos-setup\n",
    "qos-levels\n qos-level\n name: a\n sl: 1\n path-bits: x\n end-qos-level\nend-qos-levels\n",
    "qos-levels\n qos-level\n name: a\n sl: 99\n path-bits: 1,2-3\n end-qos-level\nend-qos-levels\n",   # AC10
]


def _errors(stderr: str, log: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("Error")] + \
        [ln.split("-> ", 1)[1] for ln in log.splitlines() if "ERR AC" in ln]


@need_ibsim()
def test_policy_errors_at_opensms_line_and_column(tmp_path, capfd):
    """Each bad policy given to the real opensm (-o -Q -Y) and to softrdma's parser: the same
    stderr line and the same log lines (ERR AC05 with line:column, AC03 / AC10 / AC04)."""
    from softrdma.sm.prtn_config import Partitions, PrtnOptions, make_partitions
    from softrdma.sm.qos_policy import load
    sub = load_net(fixture("ft2_64.net.xz"))
    prtns = Partitions()                   # no partition file: the default partition, as the real one has
    make_partitions(sub, prtns, PrtnOptions(config_file=str(tmp_path / "none")), L.Log(None), {})
    fab = IbsimFabric(tmp_path)
    try:
        for i, text in enumerate(BAD_POLICIES):
            path = tmp_path / f"policy{i}.conf"
            path.write_text(text)
            sm = fab.real_sm(f"sm{i}", "host0001", "-o", "-Q", "-Y", str(path))
            sm.wait(60)
            real = _errors((tmp_path / f"sm{i}.out").read_text(), sm.log.read_text())
            log = L.Log(str(tmp_path / f"ours{i}.log"))
            capfd.readouterr()
            assert load(str(path), log, prtns, sub) is None
            log.close()
            ours = _errors(capfd.readouterr().err, (tmp_path / f"ours{i}.log").read_text())
            assert len(real) >= 2 and ours == real, (text, real, ours)
    finally:
        fab.close()


# -- path-bits: parsed, and (as in opensm) used by nothing ------------------------------------------

PATH_BITS_POLICY = """port-groups
    port-group
        name: A
        port-guid: 0x0002c90400000011
    end-port-group
end-port-groups
qos-levels
    qos-level
        name: default
        sl: 0
    end-qos-level
    qos-level
        name: bits
        sl: 3
        path-bits: 1, 2-3
    end-qos-level
end-qos-levels
qos-match-rules
    qos-match-rule
        source: A
        qos-level-name: bits
    end-qos-match-rule
end-qos-match-rules
"""


def test_a_port_name_beyond_its_nodes_ports():
    """(opensm reads past its port table there -- what it answers varies from run to run)"""
    from softrdma.sm.qos_policy import PolicyError, parse
    sub = load_net(fixture("ft2_64.net.xz"))
    text = "port-groups\n port-group\n name: g\n port-name: {}\n end-port-group\nend-port-groups\n"
    with pytest.raises(PolicyError) as e:
        parse(text.format("host0002/P2"), subnet=sub)
    assert (e.value.line, e.value.column, e.value.what) == (5, 16, "'host0002' - port number out of range in port name")
    with pytest.raises(PolicyError) as e:
        parse(text.format("leaf001/P37"), subnet=sub)
    g = parse(text.format("leaf001/P36, host0002/p1, nosuch/P1") + "qos-ulps\n default : 1\nend-qos-ulps\n",
              subnet=sub).groups["g"]
    host0002 = sub.ports[0x0002c90400000011].node
    assert g.ports == {(0x0002c90300100000, 36), (host0002.guid, 1)} and not g.port_names


def test_path_bits_are_read_into_the_level():
    from softrdma.sm.qos_policy import parse
    p = parse(PATH_BITS_POLICY)
    assert p.levels["bits"].path_bits == [(1, 1), (2, 3)] and p.levels["bits"].sl == 3


def paths_with_lmc(tmp_path, which):
    """The real saquery's PathRecords between host0002 (whose paths have the 'bits' level) and
    host0003 with LMC 1: every pair of their LIDs, both ways."""
    def queries(lid):
        a, b = int(lid["host0002"]), int(lid["host0003"])
        return [("host0002", ("--src-to-dst", f"{x + i}:{y + j}")) for x, y in ((a, b), (b, a))
                for i in (0, 1) for j in (0, 1)]
    return saquery_transcript(tmp_path, which, ["-s", "1", "-l", "1", "-Q", "-Y", "{tmp}/qos-policy.conf"],
                              {"qos-policy.conf": PATH_BITS_POLICY}, queries,
                              (("--src-to-dst", "{host0002}:{host0003}"), "sl......................0x3"))


@need_ibsim()
@pytest.mark.slow
def test_path_bits_with_lmc_as_opensm(tmp_path):
    real, ours = real_and_ours(tmp_path, paths_with_lmc)
    assert real.count("PathRecord dump") == 8 and real.count("sl......................0x3") == 4
    assert ours == real
