"""A standby that outranks the master it polls sends the master trap 144
(SM priority changed) at every poll, as opensm's standby does: a master that
missed our port's IsSM would otherwise never hand the subnet over."""

from __future__ import annotations

from types import SimpleNamespace

from softrdma.sm import run
from softrdma.sm.sminfo import RemoteSm, SmInfoState
from softrdma.sm.subnet import Node, Physp, Subnet
from softrdma.wire import smp
from softrdma.wire.mad import Method, MgmtClass
from softrdma.wire.smp import SmState


class FakePort:
    def __init__(self):
        self.sent = []

    def send(self, mad, dlid=0xFFFF, dqp=0, sqp=0, length=None, *, slid=None, block=1.0):
        self.sent.append((bytes(mad), dlid, slid))


def _standby(my_guid, master: RemoteSm, master_state):
    """An SmLoop in STANDBY under ``master``, whose poll answers SMInfo with ``master_state``."""
    loop = object.__new__(run.SmLoop)
    loop.s = {"poll_retries": 3}
    loop.port = FakePort()
    loop.trap_tid = 0
    loop.sminfo = SmInfoState(guid=my_guid, priority=0)
    loop.sminfo.state, loop.sminfo.master = SmState.STANDBY, master
    sub = Subnet()
    node = Node(guid=my_guid - 1, type=1, num_ports=1)                          # a CA
    me = Physp(node=node, num=1, guid=my_guid, lid=3,
               port_info=bytes(smp.PORT_INFO.encode(CapMask=smp.CAP_IS_SM | 0x40)).ljust(64, b"\0"))
    sub.ports[my_guid] = me
    loop.subnet = sub
    loop._mads = lambda: None
    answer = SmInfoState(guid=master.guid, priority=master.priority)
    answer.state = master_state

    def drive(q, qs):
        qs.results["m"] = answer.attr()
    loop._drive = drive
    loop.log = SimpleNamespace(info=lambda *a: None, verbose=lambda *a: None)
    return loop


def test_a_standby_that_outranks_its_master_sends_trap_144_at_every_poll():
    master = RemoteSm(guid=0x2C904000001F1, priority=0, state=SmState.MASTER, lid=7)
    loop = _standby(0x2C90400000001, master, SmState.MASTER)     # ours: the lower GUID
    loop._poll_master()
    loop._poll_master()
    assert len(loop.port.sent) == 2
    mad, dlid, slid = loop.port.sent[0]
    assert (dlid, slid) == (7, 3)
    assert mad[1] == MgmtClass.SUBN_LID_ROUTED and mad[3] == Method.TRAP
    assert int.from_bytes(mad[16:18], "big") == smp.SmpAttr.NOTICE
    n = smp.NOTICE.decode(smp.smp_data(mad))
    assert n["NoticeTrapNumber"] == 144 and n["NoticeIssuerLID"] == 3 and n["NoticeType"] == 4
    o = smp.SMP_DATA_OFFSET + smp.NOTICE_DATA_DETAILS[0]
    assert int.from_bytes(mad[o + 2:o + 4], "big") == 3                      # the LID that changed
    assert mad[o + 5] == smp.TRAP_144_OTHER_LOCAL_CHANGES
    assert int.from_bytes(mad[o + 6:o + 10], "big") & smp.CAP_IS_SM
    assert int.from_bytes(mad[o + 10:o + 12], "big") == smp.TRAP_144_SM_PRIORITY_CHANGE
    assert mad[8:16] != loop.port.sent[1][0][8:16]                            # a new TID each


def test_no_trap_under_a_better_master_or_one_not_master():
    better = RemoteSm(guid=0x2C904000001F1, priority=5, state=SmState.MASTER, lid=7)
    loop = _standby(0x2C90400000001, better, SmState.MASTER)
    loop._poll_master()
    assert loop.port.sent == []
    lesser = RemoteSm(guid=0x2C904000001F1, priority=0, state=SmState.MASTER, lid=7)
    loop = _standby(0x2C90400000001, lesser, SmState.DISCOVERING)
    loop._poll_master()
    assert loop.port.sent == []
