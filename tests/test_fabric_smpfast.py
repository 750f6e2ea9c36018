"""The compiled directed-route path (fabric/_smpfast.c, Router.directed_fast)
against the reference (Router.inject): two copies of one fabric take the same
few thousand random requests -- Gets and Sets of every SMA attribute along
good and bad directed routes, with links going down, ports disabled by the
Sets themselves, error rates, LID-routed parts, responses and traps mixed in
-- one through each path, as the server runs them.  Every answer must be the
same datagram, and after every request both models must be the same, every
port counter included."""

import os
import random

import pytest

from softrdma.fabric import gen, route
from softrdma.fabric.route import Router
from softrdma.wire import ibsim, smp
from softrdma.wire.mad import Method
from softrdma.wire.smp import SmpAttr

if not Router.fast:
    if os.environ.get("CI") == "true":
        raise RuntimeError("softrdma.fabric._smpfast was not built (gcc and the Python headers are "
                           "installed in CI)")
    pytest.skip("softrdma.fabric._smpfast was not built", allow_module_level=True)

ATTRS = [SmpAttr.NODE_INFO, SmpAttr.NODE_DESC, SmpAttr.PORT_INFO, SmpAttr.SWITCH_INFO,
         SmpAttr.PKEY_TABLE, SmpAttr.SL_TO_VL_TABLE, SmpAttr.VL_ARB_TABLE, SmpAttr.GUID_INFO,
         SmpAttr.LINEAR_FWD_TABLE, SmpAttr.MCAST_FWD_TABLE, SmpAttr.SM_INFO, 0x7777]
TID_TOP = 3


def _fabric():
    f, _ = gen.fat_tree2(leaves=4, spines=2, hosts_per_leaf=3, radix=8)
    return f


def _state(f):
    """Everything the model holds, by names (no object identities)."""
    out = []
    for n in f.nodes:
        out.append((n.nodeid, bytes(n.lft) if n.lft is not None else None, n.lft_top, n.state_change,
                    n.lifetime, n.mft_top, repr(n.mft), repr(n.sl2vl)))
        for p in n.ports:
            if p is None:
                continue
            out.append(tuple(getattr(p, k) if k not in ("node", "remote", "vports") else
                             (getattr(p, k).name if k == "remote" and p.remote is not None else None)
                             for k in type(p).__slots__))
    return out


def _path(rng, f, start):
    """A directed route from start: mostly one that exists, sometimes not."""
    path, cur = [], start
    for _ in range(rng.choice([0, 1, 2, 3, 3, 4, 4, 5])):
        node = cur.node
        if rng.random() < 0.04:
            path.append(rng.choice([0, node.nports + 1, 200]))     # no such port
            break
        cabled = [p for p in node.ports[1:] if p.remote is not None]
        out = rng.choice(cabled or node.ports[1:])
        path.append(out.num)
        if out.remote is None:
            break
        cur = out.remote
    return path


def _set_data(rng, f, attr):
    if attr == SmpAttr.PORT_INFO:
        d = smp.PORT_INFO.decode(bytes(64))
        d.update(Lid=rng.randrange(1, 60), LinkState=rng.choice([0, 0, 0, 1, 2, 3, 4, 5]),
                 PhysLinkState=rng.choice([0] * 8 + [2, 2, 3]), OperVLs=rng.choice([0, 1, 3, 4, 5]),
                 VLCap=4, LMC=rng.choice([0, 1]), SMLid=1, LinkSpeedEnabled=rng.choice([0, 1, 3, 7]))
        return bytes(smp.PORT_INFO.encode(d))
    if attr == SmpAttr.LINEAR_FWD_TABLE:
        return bytes(rng.randrange(0, 10) for _ in range(64))
    if attr == SmpAttr.SWITCH_INFO:
        return bytes(smp.SWITCH_INFO.encode(LinearFdbTop=rng.randrange(0, 100), StateChange=rng.choice([0, 1])))
    return bytes(rng.randrange(256) for _ in range(64))


def _request(rng, f, start):
    attr = rng.choice(ATTRS)
    method = rng.choice([Method.GET, Method.GET, Method.SET, Method.SET, Method.GET_RESP, Method.TRAP_REPRESS])
    mod = rng.choice([0, 1, 2, 3, 5, 9])
    data = _set_data(rng, f, attr) if method == Method.SET else b""
    kw = {}
    r = rng.random()
    if r < 0.03:
        kw["dr_slid"] = 1                       # a LID-routed part first
    elif r < 0.05:
        kw["dr_dlid"] = 7                       # a LID-routed part after: dropped
    elif r < 0.06:
        kw["hop_ptr"] = 1
    mad = smp.build_dr_smp(method, attr, _path(rng, f, start), mod, data, tid=rng.randrange(1 << 32), **kw)
    if rng.random() < 0.02:
        mad[4] |= 0x80                          # the D bit on a request
    if rng.random() < 0.01:
        mad[2] = 7                              # a class version nobody speaks
    return ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad, 0, 256)


def _reference(router, port, buf):
    """What the server's Python path sends for buf: [(port name, packet)]."""
    dlid, slid, dqp, sqp, _status, _length, raw = ibsim.SIM_REQUEST.unpack(buf)
    mad = bytearray(raw)
    if not mad[3] & 0x80:
        mad[8:10] = TID_TOP.to_bytes(2, "big")
    return [(d.port.name, d.dropped, ibsim.build_request(d.dlid, d.slid, d.qp, d.sqp, d.mad, d.status, 256))
            for d in router.inject(port, mad, slid, dlid, sqp, dqp)]


def _sent(port, r):
    """What the server sends for a compiled result ``(deliveries, packet)``, as ``_reference``."""
    ds, pkt = r
    out = [(d.port.name, d.dropped, ibsim.build_request(d.dlid, d.slid, d.qp, d.sqp, d.mad, d.status, 256))
           for d in ds]
    if pkt is not None:
        out.append((port.name, False, pkt))
    return out


def _compiled(router, port, buf):
    r = router.fast_result(port, buf, router.fast_handler(port, TID_TOP, port)(buf))
    if r is None:
        return _reference(router, port, buf), False
    return _sent(port, r), True


@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_path_is_the_reference(seed):
    rng = random.Random(seed)
    a, b = _fabric(), _fabric()
    ra, rb = Router(a, seed=seed), Router(b, seed=seed)
    starts = [n.nodeid for n in a.nodes if not n.is_switch][:3] + ["leaf001"]
    taken = 0
    for step in range(1500):
        if rng.random() < 0.02:                 # a cable goes dark or comes back
            n = rng.choice(a.nodes)
            node, num = n.nodeid, rng.randrange(1, min(n.nports, 3) + 1)
            up = rng.random() < 0.5
            for f, r in ((a, ra), (b, rb)):
                p = f.by_id[node].ports[num]
                if p.remote is not None:
                    r.link_up(p) if up else r.link_down(p)
        if rng.random() < 0.02:                 # the `error` command
            n = rng.choice(a.nodes)
            node, num, rate = n.nodeid, rng.randrange(1, min(n.nports, 3) + 1), rng.choice([0, 0, 30, 100])
            for f in (a, b):
                f.by_id[node].ports[num].err_rate = rate
        sid = rng.choice(starts)
        pa = a.by_id[sid].ports[0 if a.by_id[sid].is_switch else 1]
        pb = b.by_id[sid].ports[0 if b.by_id[sid].is_switch else 1]
        buf = _request(rng, a, pa)
        want = _reference(ra, pa, buf)
        got, fast = _compiled(rb, pb, buf)
        taken += fast
        assert got == want, f"step {step}"
        assert _state(a) == _state(b), f"step {step}"
    assert taken > 150, taken                   # a good part took the compiled path


def test_a_set_that_takes_its_own_way_back_down_goes_to_the_reference():
    """A PortInfo Set disabling the port its answer must come back through: the
    compiled path applies it and hands the walk back to the reference, which
    drops the answer (ETIMEDOUT to the sender) -- as the reference alone does."""
    outs = []
    for compiled in (False, True):
        f = _fabric()
        r = Router(f)
        host = f.by_id["host0001"].ports[1]
        d = smp.PORT_INFO.decode(bytes(64))
        d.update(PhysLinkState=3)               # Disabled
        mad = smp.build_dr_smp(Method.SET, SmpAttr.PORT_INFO, [1], host.remote.num,
                               bytes(smp.PORT_INFO.encode(d)), tid=5)
        buf = ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad, 0, 256)
        got = _compiled(r, host, buf)[0] if compiled else _reference(r, host, buf)
        outs.append((got, _state(f)))
        assert host.remote.phys == smp.PhysState.DISABLED
        assert [dropped for _, dropped, _ in got] == [True]
    assert outs[0] == outs[1]


def test_counters_of_a_plain_get():
    """A 3-hop Get (host, leaf, spine, leaf) and its answer: every link crossed
    counts one packet of 72 words each way on both ends."""
    f = _fabric()
    r = Router(f)
    host = f.by_id["host0001"].ports[1]
    leaf = host.remote.node
    up = next(p for p in leaf.ports[1:] if p.remote is not None and p.remote.node.nodeid.startswith("spine"))
    down = next(p for p in up.remote.node.ports[1:] if p.remote is not None and p.remote.node is not leaf)
    mad = smp.build_dr_smp(Method.GET, SmpAttr.NODE_INFO, [1, up.num, down.num], tid=9)
    buf = ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad, 0, 256)
    ds, pkt = r.directed_fast(host, buf, TID_TOP, host)
    answer = ibsim.parse_request(pkt)
    assert ds == [] and answer.mad[3] == Method.GET_RESP and answer.mad[8:10] == b"\0\3"
    info = smp.NODE_INFO.decode(answer.mad, 64)
    assert info["Guid"] == down.remote.node.guid and info["LocalPort"] == down.remote.num
    crossed = {p.name for p in f.ports() if p.pc is not None}
    assert crossed == {p.name for p in (host, host.remote, up, up.remote, down, down.remote)}
    for p in f.ports():
        if p.pc is not None:
            assert p.pc[route.model.PC_XMIT_PKTS] == p.pc[route.model.PC_RCV_PKTS] == 1
            assert p.pc[route.model.PC_XMIT_DATA] == p.pc[route.model.PC_RCV_DATA] == route.MAD_WORDS


def _twins(make, steps):
    """Run ``steps(fabric)`` -> [(port, request)] on two copies made by ``make``:
    the reference on one, the compiled handler on the other; both answers and
    both models must match.  Returns the compiled answers' kinds."""
    a, b = make(), make()
    ra, rb = Router(a), Router(b)
    kinds = []
    for (pa, buf), (pb, _) in zip(steps(a), steps(b)):
        r = rb.fast_handler(pb, TID_TOP, pb)(buf)
        kinds.append(None if r is None else "bytes" if type(r) is bytes else r[0])
        got = _reference(rb, pb, buf) if r is None else _sent(pb, rb.fast_result(pb, buf, r))
        assert got == _reference(ra, pa, buf)
        assert _state(a) == _state(b)
    return kinds


def test_a_set_that_raises_a_trap_delivers_it_first():
    """A PortInfo Set disabling a switch port: the switch's SMA raises trap 128
    to its SM (LID-routed, through the LFT), and the answer follows it."""
    def make():
        f = _fabric()
        host, leaf = f.by_id["host0001"].ports[1], f.by_id["leaf001"]
        host.lid, leaf.ports[0].lid, leaf.ports[0].smlid = 1, 5, 1
        leaf.lft, leaf.lft_top = bytearray([0xFF, host.remote.num] + [0xFF] * 62), 1
        return f

    def steps(f):
        host = f.by_id["host0001"].ports[1]
        other = next(p for p in f.by_id["leaf001"].ports[1:] if p.remote is not None and p is not host.remote)
        d = smp.PORT_INFO.decode(bytes(64))
        d.update(PhysLinkState=3)
        mad = smp.build_dr_smp(Method.SET, SmpAttr.PORT_INFO, [1], other.num, bytes(smp.PORT_INFO.encode(d)),
                               tid=11)
        return [(host, ibsim.build_request(0xFFFF, 0xFFFF, 0, 0, mad, 0, 256))]
    assert _twins(make, steps) == [2]


def test_an_answer_that_leaves_by_another_port():
    """A 2-port CA's client on port 1 sends out of port 2: the answer comes back
    at port 2, which is not the client's, and goes through the server's delivery."""
    from softrdma.fabric import model

    def make():
        f = model.Fabric()
        ca = f.add_node(model.Node(smp.NodeType.CA, "ca", 2, 0x100))
        sw = f.add_node(model.Node(smp.NodeType.SWITCH, "sw", 4, 0x200))
        f.connect(ca.ports[1], sw.ports[1])
        f.connect(ca.ports[2], sw.ports[2])
        return f

    def steps(f):
        p1 = f.by_id["ca"].ports[1]
        return [(p1, ibsim.build_request(0xFFFF, 0xFFFF, 0, 0,
                                         smp.build_dr_smp(Method.GET, SmpAttr.NODE_INFO, path, tid=12), 0, 256))
                for path in ([2], [2, 1], [1, 2])]     # out 2 back at 2 (twice), out 1 back at 1
    assert _twins(make, steps) == [0, 0, "bytes"]
