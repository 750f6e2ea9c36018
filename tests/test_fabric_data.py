"""The fabric server's data socket: fake IB device ports (raw SEQPACKET
clients speaking wire.fabriclink) attached to the CAs of a 2-switch
fabric -- attach rules, PORT_INFO pushes, forwarding, link events,
detach, malformed input."""

import errno
import os
import socket
import threading

import pytest

from softrdma.fabric import model, topo
from softrdma.fabric.server import Server, control
from softrdma.wire import fabriclink, smp
from softrdma.wire.smp import PortState

from ibfabric_helpers import LID, NET_2SW, FakeDevice, data_packet, program

_seq = [0]


class InProcess:
    """``Server`` on NET_2SW (programmed as after a sweep) running in a thread."""

    def __init__(self, tmp, programmed=True):
        _seq[0] += 1
        self.fabric = topo.loads(NET_2SW)
        if programmed:
            program(self.fabric)
        self.path = str(tmp / "fab.data")
        self.srv = Server(self.fabric, f"ibdt{os.getpid()}n{_seq[0]}", data_socket=self.path)
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()
        self.devs = []

    def _run(self):
        while not self.stop.is_set():
            self.srv.run_once(0.02)

    def dev(self, node, port=1, name=None):
        d = FakeDevice(self.path, node, port, name or f"dev-{node}")
        self.devs.append(d)
        return d

    def control(self, line):
        return control(self.srv.base, line)

    def close(self):
        for d in self.devs:
            d.close()
        self.stop.set()
        self.t.join(5)
        self.srv.close()


@pytest.fixture
def fab(tmp_path):
    f = InProcess(tmp_path)
    yield f
    f.close()
    assert not os.path.exists(f.path), "the data socket file stays after exit"


def _pi(info):
    return smp.PORT_INFO.decode(info.port_info)


def test_attach_pushes_what_the_sma_answers(fab):
    d = fab.dev("h1")
    d.wait(lambda: d.infos, what="PORT_INFO")
    info = d.infos[0]
    pi = _pi(info)
    assert pi["Lid"] == LID["h1"] and pi["LinkState"] == PortState.ACTIVE and pi["LocalPort"] == 1
    ni = smp.NODE_INFO.decode(info.node_info.ljust(64, b"\0"))
    h1 = fab.fabric.node("h1")
    assert ni["Guid"] == h1.guid and ni["PortGuid"] == h1.ports[1].guid and ni["NodeType"] == 1
    assert smp.decode_guid_info(info.guid_info)[0] == h1.ports[1].guid
    assert info.pkeys[0] == 0xFFFF and len(info.pkeys) == model.CA_PARTITION_CAP
    # the quoted name, the node GUID and a port GUID select the CA as well
    for sel in ('"h2"', f"{fab.fabric.node('h3').guid:#x}", f"{fab.fabric.node('h4').ports[1].guid:#x}"):
        d = fab.dev(sel)
        d.wait(lambda: d.infos, what=f"PORT_INFO for {sel}")


@pytest.mark.parametrize("node,port,err", [("nope", 1, errno.ENOENT), ("sw1", 1, errno.EINVAL),
                                           ("h1", 2, errno.EINVAL)])
def test_attach_refused(fab, node, port, err):
    d = fab.dev(node, port)
    assert d.wait_error()[0] == err


def test_port_taken_then_freed_by_a_closed_connection(fab):
    a = fab.dev("h1", name="first")
    a.wait(lambda: a.infos)
    b = fab.dev("h1", name="second")
    e = b.wait_error()
    assert e[0] == errno.EBUSY and "first" in e[1]
    a.close()
    c = fab.dev("h1", name="third")
    c.wait(lambda: c.infos, what="PORT_INFO after re-attach")
    assert "third" in fab.control("attached")


def test_unicast_across_a_switch_hop(fab):
    a, b = fab.dev("h1"), fab.dev("h4")
    for d in (a, b):
        d.wait(lambda d=d: d.infos)
    pkts = [data_packet(LID["h4"], LID["h1"], os.urandom(16 + 4 * i)) for i in range(50)]
    a.inject(pkts)
    assert b.take(50) == pkts
    words = sum(len(p) - 2 for p in pkts) // 4
    sw2 = fab.fabric.node("sw2")
    assert sw2.ports[2].pc[model.PC_XMIT_DATA] == words
    assert sw2.ports[2].pc[model.PC_XMIT_PKTS] == 50
    # and back
    b.inject([data_packet(LID["h1"], LID["h4"])])
    assert a.take(1) == [data_packet(LID["h1"], LID["h4"])]


def test_unattached_destination_counts_a_discard(fab):
    a = fab.dev("h1")
    a.wait(lambda: a.infos)
    a.inject([data_packet(LID["h3"], LID["h1"])])
    sw2_1 = fab.fabric.node("sw2").ports[1]
    a.wait(lambda: sw2_1.pc and sw2_1.pc[model.PC_XMIT_DISCARDS] == 1, what="a discard")


def test_link_down_pushes_port_info_and_drops(fab):
    a, b = fab.dev("h1"), fab.dev("h4")
    for d in (a, b):
        d.wait(lambda d=d: d.infos)
    assert fab.control("link down sw2 2").startswith("ok")
    b.wait(lambda: len(b.infos) >= 2, what="PORT_INFO after link down")
    pi = _pi(b.infos[-1])
    assert pi["LinkState"] == PortState.DOWN and pi["PhysLinkState"] != smp.PhysState.LINK_UP
    assert len(a.infos) == 1                 # nothing changed for h1
    a.inject([data_packet(LID["h4"], LID["h1"])])
    sw2_2 = fab.fabric.node("sw2").ports[2]
    a.wait(lambda: sw2_2.pc[model.PC_XMIT_DISCARDS] == 1, what="a discard at sw2[2]")
    assert fab.control("link up sw2 2").startswith("ok")
    b.wait(lambda: _pi(b.infos[-1])["LinkState"] == PortState.INIT, what="PORT_INFO Init")


def test_malformed_messages_close_only_their_connection(fab):
    good = fab.dev("h4")
    good.wait(lambda: good.infos)
    for junk in (b"", b"\x01", b"\x03\x01\x00\x05\x00", fabriclink.pack_port_info(
            bytes(40), bytes(64), bytes(64), [1]), b"\x09\x01\x00\x00"):
        d = fab.dev("h1") if junk != b"" else FakeDevice(fab.path, "h1", attach=False)
        if junk == b"":
            d.send(b"\x03\x01\x00\x00")     # PACKETS before ATTACH
        else:
            d.wait(lambda d=d: d.infos)
            d.send(junk)
        d.sock.settimeout(5)
        while True:
            m = d.sock.recv(70000)
            if not m:
                break
        d.close()
    # bad packets inside a good message are dropped and counted, the connection stays
    a = fab.dev("h1")
    a.wait(lambda: a.infos)
    bad = bytearray(data_packet(LID["h4"], LID["h1"]))
    bad[-2] ^= 0xFF
    a.inject([bytes(bad), data_packet(LID["h4"], LID["h1"])])
    assert good.take(1) == [data_packet(LID["h4"], LID["h1"])]
    assert fab.fabric.node("sw1").ports[1].pc[model.PC_RCV_ERRORS] == 1
    assert fab.srv.datasock.stats["bad_msgs"] == 5
    assert fab.control("stats").startswith("ok")


def test_a_stale_socket_file_is_replaced_and_a_live_one_refused(tmp_path):
    path = tmp_path / "fab.data"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.close()                                   # stale: nobody listens
    f = InProcess(tmp_path)
    try:
        with pytest.raises(model.FabricError, match="another fabric server"):
            Server(topo.loads(NET_2SW), f"ibdt{os.getpid()}x", data_socket=f.path)
    finally:
        f.close()
