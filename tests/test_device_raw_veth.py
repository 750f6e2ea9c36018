"""Raw packet QPs on a real link: two namespaces joined by a veth pair,
each with its own softrdmad.  A's raw QP sends UDP frames to B's MAC and
address; B's flow steers them to its raw QP while B's kernel still takes
them (a UDP socket receives the same datagrams); and A's own flow gets
A's frames through the device's loopback (a NIC loops a raw QP's frames
back to its own steering rules: the wire never brings them back)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import textwrap

import pytest

from netns_helpers import TwoHosts, need_root

PORT = 41713
MSG = 128

COMMON = textwrap.dedent("""
    import json, sys, time
    from softrdma.enums import IBV_ACCESS_LOCAL_WRITE, IBV_FLOW_SPEC_UDP, IBV_QPT_RAW_PACKET
    from softrdma.pyverbs.flow import Flow, FlowAttr
    from softrdma.pyverbs.mr import MR
    from softrdma.pyverbs.spec import Ipv4ExtSpec, TcpUdpSpec
    from softrdma.verbs import cq as cq_m, device, pd as pd_m, qp as qp_m, wr as wr_m
    MSG, PORT, DST = %d, %d, sys.argv[1]
    ctx = device.Context(name="rxe0")

    def raw_qp(n):
        pd = pd_m.PD(ctx)
        mr = MR(pd, MSG * n, IBV_ACCESS_LOCAL_WRITE)
        cq = cq_m.CQ(ctx, 64)
        qp = qp_m.QP(pd, qp_m.QPInitAttr(IBV_QPT_RAW_PACKET, scq=cq, rcq=cq, cap=qp_m.QPCap(8, 8, 1, 1)),
                     qp_m.QPAttr(port_num=1))
        return pd, mr, cq, qp

    def steered(n):
        pd, mr, cq, qp = raw_qp(n)
        fa = FlowAttr(num_of_specs=2)
        fa.specs += [Ipv4ExtSpec(dst_ip=DST), TcpUdpSpec(IBV_FLOW_SPEC_UDP, dst_port=PORT)]
        fl = Flow(qp, fa)
        for i in range(n):
            qp.post_recv(wr_m.RecvWR(i, 1, [wr_m.SGE(mr.buf + i * MSG, MSG, mr.lkey)]))
        return mr, cq, qp, fl

    def frames(mr, cq, n, timeout=20):
        out, end = [], time.monotonic() + timeout
        while len(out) < n and time.monotonic() < end:
            for wc in cq.poll(8)[1]:
                out.append(bytes(mr.read(wc.byte_len, wc.wr_id * MSG)).hex() if wc.status == 0 else wc.status)
        return out
""" % (MSG, PORT))

RECEIVER = COMMON + textwrap.dedent("""
    import socket
    mr, cq, qp, fl = steered(4)
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.bind((DST, PORT))
    u.settimeout(20)
    print("ready", flush=True)
    got = frames(mr, cq, 3)
    kernel = [u.recv(2048).hex() for _ in range(3)]
    print(json.dumps({"raw": got, "kernel": kernel}), flush=True)
""")

SENDER = COMMON + textwrap.dedent("""
    mirror_mr, mirror_cq, mirror_qp, mirror_fl = steered(4)     # A's own rule for the same frames
    pd, mr, cq, qp = raw_qp(1)
    for i, f in enumerate(sys.argv[2:]):
        f = bytes.fromhex(f)
        mr.write(f, len(f))
        qp.post_send(wr_m.SendWR(i, sg=[wr_m.SGE(mr.buf, len(f), mr.lkey)]))
        wcs = []
        while not wcs:
            wcs = cq.poll(1)[1]
        assert wcs[0].status == 0, wcs
    print(json.dumps({"loopback": frames(mirror_mr, mirror_cq, 3)}), flush=True)
""")


def udp_frame(dst_mac: bytes, src_mac: bytes, src: str, dst: str, payload: bytes) -> bytes:
    import socket
    ip = struct.pack("!2B3H2BH4s4s", 0x45, 0, 20 + 8 + len(payload), 0, 0x4000, 64, socket.IPPROTO_UDP, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    s = sum(struct.unpack("!10H", ip))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    return dst_mac + src_mac + b"\x08\x00" + ip + struct.pack("!4H", 5555, PORT, 8 + len(payload), 0) + payload


@pytest.fixture
def hosts():
    need_root()
    th = TwoHosts()
    try:
        th.start_daemons()
        yield th
    finally:
        th.close()


def test_raw_frames_cross_a_veth_and_loop_back_to_own_rules(hosts):
    th = hosts
    mac = [bytes.fromhex(th.exec(ns, "cat", f"/sys/class/net/{dev}/address").stdout.strip().replace(":", ""))
           for ns, dev in zip(th.ns, th.dev)]
    payloads = [f"raw frame {i} ".encode() * 3 for i in range(3)]
    frames = [udp_frame(mac[1], mac[0], th.ip[0], th.ip[1], p) for p in payloads]
    rx = th.popen(1, [sys.executable, "-c", RECEIVER, th.ip[1]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                  text=True)
    try:
        assert rx.stdout.readline().strip() == "ready", rx.stderr.read()
        tx = th.popen(0, [sys.executable, "-c", SENDER, th.ip[1], *(f.hex() for f in frames)],
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tout, terr = tx.communicate(timeout=60)
        assert tx.returncode == 0, terr
        rout, rerr = rx.communicate(timeout=60)
        assert rx.returncode == 0, rerr
    finally:
        for p in (rx,):
            if p.poll() is None:
                p.kill()
                p.wait()
    got = json.loads(rout)
    assert got["raw"] == [f.hex() for f in frames]                 # steered, whole frames, in order
    assert got["kernel"] == [p.hex() for p in payloads]            # and still the kernel's
    assert json.loads(tout)["loopback"] == [f.hex() for f in frames]
