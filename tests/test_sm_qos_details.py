"""QoS details of softrdma's SM, each as opensm 3.3.23 has it.

* use_optimized_slvl (osm_qos.c's optimized SL2VL programming): on switches
  whose SwitchInfo offers OptimizedSLtoVLMappingProgramming, one Set for all
  input and output ports and one per output port whose OperationalVLs differ
  from most ports' -- the same tables as one Set per (input, output) pair,
  with far fewer SMPs; switches without the capability (ibsim's) get their
  tables pair by pair, and the real ``smpquery sl2vl`` prints the same after
  the real opensm with the option on as after ours.
"""

import pytest

from sm_helpers import IbsimFabric, fixture, ibnetdiscover_lids, load_net, need_ibsim, real_and_ours
from softrdma.sm import log as L
from softrdma.sm import main as sm_main
from softrdma.sm.qos import QosSetup
from softrdma.wire.smp import PORT_INFO, SWITCH_INFO, SmpAttr


class EchoSweep:
    """What QosSetup needs of a sweep: a queue that answers every Set with its own data."""

    def __init__(self, subnet):
        self.subnet, self.log, self.failed, self.sent, self.phase = subnet, L.Log(None), 0, [], ""
        self.q = self

    def post_send(self, smp, cb):
        self.sent.append(smp)
        cb(smp)


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
