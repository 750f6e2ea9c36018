"""A hostile or broken client on the control socket: every bad request gets
an errno reply, the daemon never dies, never leaks an fd and never keeps
shared memory the client can pull from under it; and the daemon's start
and stop leave nothing behind whenever a signal comes.

The client here talks the control protocol itself (``uapi.control``:
JSON records on SOCK_SEQPACKET, fds in SCM_RIGHTS), as a process that does
not use the library -- or a buggy one -- would."""

from __future__ import annotations

import errno
import json
import os
import random
import struct
import subprocess
import sys
import textwrap
import time

import pytest

from daemon_helpers import RawControl as Raw, RunningDaemon, daemon_in_shm
from softrdma.uapi.commands import COMMANDS
from softrdma.uapi import abi
from softrdma.uapi.control import MAX_MSG, send_msg
from softrdma.uapi.shm import HEADER_BYTES, MAGIC
from shm_helpers import shm_dir


@pytest.fixture
def daemon(monkeypatch):
    with daemon_in_shm("robust") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        yield d


def memfd(size: int, *, seal: bool = True, ring: tuple[int, int] | None = None) -> int:
    """A memfd of ``size`` bytes, sealed against shrinking (as the library
    makes them) unless ``seal`` is False; ``ring``: (nslots, slot_size) header."""
    fd = os.memfd_create("test", os.MFD_CLOEXEC | (os.MFD_ALLOW_SEALING if seal else 0))
    os.ftruncate(fd, size)
    if ring is not None:
        os.pwrite(fd, struct.pack("<III", MAGIC, ring[1], ring[0]), 0)
    if seal:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd


def ring_fd(nslots: int, slot: int, **kw) -> int:
    return memfd(HEADER_BYTES + nslots * slot, ring=(nslots, slot), **kw)


def nfds(d, settle_to: int | None = None) -> int:
    """The daemon's open fds; the fewest seen over a moment (its sysfs
    refresh opens a file now and then), or once it is down to ``settle_to``."""
    counts = []
    end = time.monotonic() + (2.0 if settle_to is not None else 0.1)
    while time.monotonic() < end:
        counts.append(len(os.listdir(f"/proc/{d.proc.pid}/fd")))
        if settle_to is not None and counts[-1] <= settle_to:
            break
        time.sleep(0.02)
    return min(counts)


def probe(d, seconds: float = 0.0):
    """A fresh client is served (for ``seconds``): a daemon stuck elsewhere
    fails this with a timeout instead of hanging the test."""
    end = time.monotonic() + seconds
    while True:
        c = Raw(d.run_dir, timeout=5)
        try:
            c.ok("open", device="rxe0")
            c.ok("alloc_pd")
            assert c.ok("query_port", port=1)["attr"]["state"] == 4
        finally:
            c.close()
        if time.monotonic() >= end:
            return


def assert_serves(d):
    """The daemon is alive and a library client still works."""
    assert d.proc.poll() is None, "softrdmad died: " + open(d.log.name).read()[-3000:]
    probe(d)
    from softrdma.verbs import device, pd
    with device.Context(name="rxe0") as ctx:
        pd.PD(ctx).close()
        assert ctx.query_port(1).state == 4


def setup_objects(c: Raw) -> dict:
    c.ok("open", device="rxe0")
    h = {"pd": c.ok("alloc_pd")["pd"]}
    fd = ring_fd(16, abi.CQE_BYTES)
    h["cq"] = c.ok("create_cq", fds=[fd])["cq"]
    os.close(fd)
    return h


# ------------------------------------------------------------------ 1. fd ownership
def test_bad_fds_to_every_fd_command_are_einval_and_nothing_leaks(daemon):
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    before = nfds(daemon)
    r_, w_ = os.pipe()
    bell = os.eventfd(0, os.EFD_CLOEXEC)
    good_cq = ring_fd(16, abi.CQE_BYTES)
    sq, rq_ = ring_fd(4, abi.send_slot_size(1, 0)), ring_fd(4, abi.recv_slot_size(1))
    qp = dict(pd=h["pd"], send_cq=h["cq"], recv_cq=h["cq"], qp_type=2,
              cap={"max_send_wr": 4, "max_recv_wr": 4, "max_send_sge": 1, "max_recv_sge": 1})
    cases = [
        ("create_cq", [ring_fd(16, 32)], {}),                       # wrong slot size: closed twice before
        ("create_cq", [memfd(4096)], {}),                           # no ring at all
        ("create_cq", [r_], {}),                                    # not memory
        ("create_cq", [], {}),
        ("create_cq", [good_cq, good_cq], {}),
        ("create_cq", [good_cq], {"channel": 999}),                 # no such channel
        ("create_qp", [ring_fd(4, 16), rq_, bell], qp),             # SQ slots too small for a WQE
        ("create_qp", [sq, ring_fd(4, 8), bell], qp),               # RQ slots too small
        ("create_qp", [sq, rq_, r_], qp),                           # doorbell: a pipe, not an eventfd
        ("create_qp", [sq, rq_, memfd(4096)], qp),                  # doorbell: a file
        ("create_qp", [sq, rq_], qp),
        ("create_qp", [sq, rq_, bell], {**qp, "qp_type": 77}),      # EOPNOTSUPP
        ("create_srq", [ring_fd(4, 8), bell], {"pd": h["pd"], "max_sge": 1}),
        ("create_srq", [ring_fd(4, 32), w_], {"pd": h["pd"], "max_sge": 1}),
        ("reg_mr", [memfd(4096)], {"pd": h["pd"], "length": 8192, "addr": 0, "access": 1}),   # too short
        ("reg_mr", [r_], {"pd": h["pd"], "length": 4096, "addr": 0, "access": 1}),
        ("reg_mr", [memfd(4096)], {"pd": h["pd"], "length": 4096, "addr": 0}),                # no access
        ("capture_start", [ring_fd(4, 64), bell], {}),              # entries too small for a packet
        ("capture_start", [memfd(1 << 16), bell], {}),
        ("capture_start", [ring_fd(4, 8192), r_], {}),              # doorbell not an eventfd
        ("capture_start", [ring_fd(4, 8192), bell], {"directions": 9}),
    ]
    for op, fds, kw in cases:
        r = c.call(op, fds=fds, **kw)
        assert r["errno"] in (errno.EINVAL, errno.EOPNOTSUPP), (op, kw, r)
        assert r["msg"], r
        assert daemon.proc.poll() is None, f"softrdmad died on {op} {kw}"
    # a command that takes no fds: they are closed, not kept
    assert c.call("alloc_pd", fds=[memfd(4096), bell, r_])["errno"] == 0
    assert nfds(daemon, settle_to=before) == before, "the daemon kept fds of failed requests"
    # and the good fds still work
    assert c.call("create_qp", fds=[sq, rq_, bell], **qp)["errno"] == 0
    assert c.call("create_cq", fds=[good_cq])["errno"] == 0
    c.close()
    assert_serves(daemon)


# ------------------------------------------------------------------ 2. sealed shared memory
def test_unsealed_memory_is_refused_so_shrinking_it_cannot_kill_the_daemon(daemon):
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    # an unsealed SQ/RQ: the daemon reads their headers every pass; shrunk
    # under its mapping, the next read was a SIGBUS
    sq, rq_ = ring_fd(4, 128, seal=False), ring_fd(4, 64, seal=False)
    bell = os.eventfd(0, os.EFD_CLOEXEC)
    r = c.call("create_qp", fds=[sq, rq_, bell], pd=h["pd"], send_cq=h["cq"], recv_cq=h["cq"], qp_type=2,
               cap={"max_send_wr": 4, "max_recv_wr": 4, "max_send_sge": 1, "max_recv_sge": 1})
    os.ftruncate(sq, 0)
    os.ftruncate(rq_, 0)
    time.sleep(0.3)
    assert daemon.proc.poll() is None, "softrdmad died of the shrunk ring"
    assert r["errno"] == errno.EINVAL and "sealed" in r["msg"], r
    # the same for a CQ ring, MR memory and a capture ring
    r = c.call("create_cq", fds=[ring_fd(16, abi.CQE_BYTES, seal=False)])
    assert r["errno"] == errno.EINVAL and "sealed" in r["msg"], r
    r = c.call("reg_mr", fds=[memfd(4096, seal=False)], pd=h["pd"], length=4096, addr=0, access=1)
    assert r["errno"] == errno.EINVAL and "sealed" in r["msg"], r
    r = c.call("capture_start", fds=[ring_fd(4, 8192, seal=False), bell])
    assert r["errno"] == errno.EINVAL and "sealed" in r["msg"], r
    # sealed but shorter than the ring's header says
    fd = memfd(HEADER_BYTES + 64, ring=(16, abi.CQE_BYTES))
    r = c.call("create_cq", fds=[fd])
    assert r["errno"] == errno.EINVAL, r
    # an MR of sealed memory: shrinking is refused to its owner, the daemon keeps the memory
    fd = memfd(1 << 16)
    r = c.ok("reg_mr", fds=[fd], pd=h["pd"], length=1 << 16, addr=0x10000, access=1)
    with pytest.raises(PermissionError):
        os.ftruncate(fd, 0)
    c.close()
    assert_serves(daemon)


# ------------------------------------------------------------------ 3. signals during start-up
STARTUP = textwrap.dedent("""
    import os, signal, sys
    from softrdma.device import daemon as D, main as M
    where, run = sys.argv[1], sys.argv[2]
    if where == "socket":                  # the socket exists, the pid file not yet
        init = D.Daemon.__init__
        def patched(self, *a, **k):
            init(self, *a, **k)
            os.kill(os.getpid(), signal.SIGTERM)
        D.Daemon.__init__ = patched
    else:                                  # the pid file just appeared, serve() has not begun
        replace = os.replace
        def patched(src, dst):
            replace(src, dst)
            if dst.endswith("softrdmad.pid"):
                os.kill(os.getpid(), signal.SIGTERM)
        os.replace = patched
    sys.exit(M.main(["-f", "--run-dir", run, "--port", "0"]))
""")


@pytest.mark.parametrize("where", ["socket", "pid"])
def test_sigterm_during_startup_leaves_nothing_behind(tmp_path, where):
    out = subprocess.run([sys.executable, "-c", STARTUP, where, str(tmp_path)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
    assert not (tmp_path / "softrdmad.sock").exists()
    assert not (tmp_path / "softrdmad.pid").exists()


# ------------------------------------------------------------------ 4. replies longer than a record
def test_resources_with_thousands_of_objects(daemon):
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    fd = memfd(4096)
    n = 3000
    for i in range(n):
        r = c.call("reg_mr", fds=[fd], pd=h["pd"], length=4096, addr=i << 12, access=1)
        assert r["errno"] == 0, r
    from softrdma.verbs import device
    res = device.management().call("resources")[0]
    assert len(json.dumps(res)) > 4 * MAX_MSG                      # the case at hand: many records
    assert sum(1 for r in res["resources"] if r["kind"] == "mr") == n
    out = subprocess.run([sys.executable, "-m", "softrdma", "rdma", "-j", "resource", "show", "mr"],
                         capture_output=True, text=True, timeout=60, env={**os.environ,
                                                                          "SOFTRDMA_RUN": daemon.run_dir})
    assert out.returncode == 0, out.stderr
    mrs = json.loads(out.stdout)
    assert len(mrs) == n and {m["mrlen"] for m in mrs} == {4096}
    # a request longer than one record is refused with EMSGSIZE, the connection goes on
    r = c.send_raw(json.dumps({"op": "alloc_pd", "seq": 7, "pad": "x" * MAX_MSG}).encode())
    assert r["errno"] == errno.EMSGSIZE, r
    assert c.call("alloc_pd")["errno"] == 0
    c.close()
    assert_serves(daemon)


def test_a_client_that_does_not_read_cannot_stall_the_daemon(daemon):
    c = Raw(daemon.run_dir)
    c.ok("open", device="rxe0")
    c.s.setblocking(False)
    sent = 0
    try:
        while sent < 20000:                                           # until its own socket is full
            send_msg(c.s, {"op": "query_port", "seq": sent + 1, "port": 1})
            sent += 1
    except BlockingIOError:
        pass
    assert sent > 100
    probe(daemon, seconds=1.0)                                        # other clients are served meanwhile
    c.s.settimeout(10)
    seqs = [c.reply()["seq"] for _ in range(sent)]                    # and this one gets every reply, in order
    assert seqs == list(range(1, sent + 1))
    c.close()


def test_a_producer_index_far_ahead_costs_one_ring_per_pass(daemon):
    """A process writes its SQ/RQ producer index 2^31 slots ahead (no honest
    producer is ever more than a ring ahead): the daemon takes a ring's
    worth per pass -- LOC_QP_OP_ERR, the QP in ERR -- and serves the others."""
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    sq, rq_ = ring_fd(4, abi.send_slot_size(1, 0)), ring_fd(4, abi.recv_slot_size(1))
    bell = os.eventfd(0, os.EFD_CLOEXEC)
    c.ok("create_qp", fds=[sq, rq_, bell], pd=h["pd"], send_cq=h["cq"], recv_cq=h["cq"], qp_type=2,
         cap={"max_send_wr": 4, "max_recv_wr": 4, "max_send_sge": 1, "max_recv_sge": 1})
    for fd in (sq, rq_):
        os.pwrite(fd, struct.pack("<I", 1 << 31), 16)            # the producer index
    os.write(bell, (1).to_bytes(8, "little"))
    probe(daemon, seconds=1.0)
    assert daemon.proc.poll() is None
    c.close()
    assert_serves(daemon)


def test_a_connection_keeps_its_device_and_loses_it_with_the_link(tmp_path):
    """A connection is one device's context for its whole life (a second
    open of another device is EINVAL), and ``link delete`` of the device
    the caller itself has open destroys the caller's objects too."""
    run = shm_dir(f"softrdma-robust2-{os.getpid()}")
    os.makedirs(run, exist_ok=True)
    d = RunningDaemon(run, devices=("rxe0:lo", "rxe1:lo"))
    try:
        c = Raw(run)
        c.ok("open", device="rxe1")
        c.ok("open", device="rxe1")                                  # the same one again: fine
        r = c.call("open", device="rxe0")
        assert r["errno"] == errno.EINVAL, r
        setup = c.ok("alloc_pd")
        fd = ring_fd(16, abi.CQE_BYTES)
        c.ok("create_cq", fds=[fd])
        os.close(fd)
        assert {r["kind"] for r in d.resources() if r["dev"] == "rxe1"} == {"pd", "cq"}
        c.ok("link_delete", name="rxe1")
        assert [r for r in d.resources() if r["dev"] == "rxe1"] == []
        r = c.call("alloc_pd")
        assert r["errno"] == errno.EINVAL, r                         # no device any more
        assert c.call("dealloc_pd", pd=setup["pd"])["errno"] == errno.EINVAL
        c.close()
        assert d.proc.poll() is None
    finally:
        d.stop()
        import shutil
        shutil.rmtree(run, ignore_errors=True)


# ------------------------------------------------------------------ 5. malformed requests
def test_malformed_records_get_errno_replies(daemon):
    c = Raw(daemon.run_dir)
    for data in (b"not json", b"[1,2]", b"{", b"[" * 50000, b'{"op":"alloc_pd","seq":1,"x":NaN}',
                 b'{"op":"alloc_pd","seq":Infinity}', b"\xff\xfe", b'{"frag":0,"of":3,"part":"{"}',
                 b'{"op":"alloc_pd","seq":' + b"9" * 5000 + b"}"):
        r = c.send_raw(data)
        assert r["errno"] in (errno.EINVAL, errno.EMSGSIZE), (data[:40], r)
    for msg in ({"seq": 1}, {"op": 5, "seq": 2}, {"op": "no_such", "seq": 3}, {"op": "alloc_pd", "seq": [1]},
                {"op": "alloc_pd", "seq": {"a": 1}}):
        r = c.send_raw(json.dumps(msg).encode())
        assert r["errno"] in (errno.EINVAL, errno.EOPNOTSUPP), (msg, r)
    c.close()
    assert_serves(daemon)


BAD_VALUES = [None, -1, 1 << 64, 2 ** 200, 1.5, float("inf"), float("nan"), "x", "7", [], {}, True, [1, 2], {"a": 1}]


def test_every_field_of_every_command_with_bad_values(daemon):
    """Table-driven: each command's fields replaced one by one with values
    of the wrong type or out of range.  Each gets an errno reply (or, for a
    value that happens to be valid, works); the daemon lives on."""
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    from softrdma.verbs import device
    gid = device.management().call("links")[0]["links"][0]["gids"][1]
    mr_fd = memfd(1 << 16)
    mr = c.ok("reg_mr", fds=[mr_fd], pd=h["pd"], length=1 << 16, addr=0x10000, access=15)
    av = {"dgid": gid, "sgid_index": 1, "flow_label": 0, "hop_limit": 64, "traffic_class": 0, "sl": 0,
          "dlid": 0, "port_num": 1, "is_global": True}
    cap = {"max_send_wr": 4, "max_recv_wr": 4, "max_send_sge": 1, "max_recv_sge": 1, "max_inline_data": 0}
    qp_req = dict(pd=h["pd"], send_cq=h["cq"], recv_cq=h["cq"], qp_type=4, cap=cap, sq_sig_all=False)

    def qp_fds():
        return [ring_fd(4, abi.send_slot_size(1, 0)), ring_fd(4, abi.recv_slot_size(1)),
                os.eventfd(0, os.EFD_CLOEXEC)]

    fds = qp_fds()
    qp = c.ok("create_qp", fds=fds, **qp_req)["qp"]
    for fd in fds:
        os.close(fd)
    commands = [
        ("query_port", {"port": 1}, None), ("query_gid", {"index": 1}, None),
        ("dealloc_pd", {"pd": 12345}, None), ("dereg_mr", {"mr": 12345}, None),
        ("reg_mr", {"pd": h["pd"], "length": 4096, "addr": 0, "access": 1}, lambda: [memfd(4096)]),
        ("alloc_mw", {"pd": h["pd"], "type": 2}, None),
        ("create_cq", {"channel": None}, lambda: [ring_fd(16, abi.CQE_BYTES)]),
        ("destroy_cq", {"cq": 12345}, None),
        ("create_qp", qp_req, qp_fds),
        ("modify_qp", {"qp": qp, "mask": 0x1 | 0x10 | 0x20 | 0x40,
                       "attr": {"qp_state": 2, "pkey_index": 0, "port_num": 1, "qkey": 0x11}}, None),
        ("modify_qp", {"qp": qp, "mask": 0x80, "attr": {"ah_attr": av}}, None),
        ("query_qp", {"qp": qp}, None),
        ("attach_mcast", {"qp": qp, "gid": "ff0e" + "00" * 10 + "ffffe0000001", "lid": 0}, None),
        ("create_srq", {"pd": h["pd"], "max_wr": 4, "max_sge": 1, "srq_limit": 0},
         lambda: [ring_fd(4, 32), os.eventfd(0, os.EFD_CLOEXEC)]),
        ("modify_srq", {"srq": 12345, "srq_limit": 1}, None),
        ("create_ah", {"pd": h["pd"], "attr": av}, None),
        ("destroy_ah", {"ah": 12345}, None),
        ("capture_start", {"directions": 3}, lambda: [ring_fd(4, 8192), os.eventfd(0, os.EFD_CLOEXEC)]),
        ("capture_stop", {"capture": 12345}, None),
        ("link_set", {"name": "rxe0", "faults": {"loss": 0.0}, "seed": 1}, None),
        ("link_add", {"name": "rxe0", "netdev": "lo"}, None),
        ("link_delete", {"name": "nosuch"}, None),
        ("stat_get", {"dev": 0, "port": 1}, None),
        ("stat_dump", {"res": "qp", "dev": 0, "start": 0}, None),
        ("stat_snapshot", {"start": 0}, None),
        ("stat_get_status", {"dev": 0, "port": 1}, None),
    ]
    for op, base, make_fds in commands:
        for key in [*base, None]:
            for v in (BAD_VALUES if key is not None else [None]):
                m = dict(base)
                if key is not None:
                    m[key] = v
                nested = [None]
                if key in ("attr", "cap", "faults") and isinstance(base[key], dict):
                    nested = list(base[key])
                for sub in nested:
                    if sub is not None:
                        m = dict(base)
                        m[key] = {**base[key], sub: v}
                        if sub == "ah_attr":
                            m[key] = {"ah_attr": {**av, "dgid": v}}
                    fds = make_fds() if make_fds else []
                    r = c.call(op, fds=fds, **m)
                    for fd in fds:
                        os.close(fd)
                    assert isinstance(r.get("errno"), int), (op, m, r)
                    assert r["errno"] == 0 or r.get("msg"), (op, m, r)
                    assert daemon.proc.poll() is None, f"softrdmad died on {op} {m}"
    c.close()
    assert_serves(daemon)
    del mr


def test_bad_attribute_values_leave_the_qp_as_it_was(daemon):
    from softrdma.verbs import cq, device, pd, qp
    from softrdma.verbs.errors import PyverbsRDMAError
    ctx = device.Context(name="rxe0")
    p = pd.PD(ctx)
    c = cq.CQ(ctx, 8)
    q = qp.QP(p, qp.QPInitAttr(2, scq=c, rcq=c, cap=qp.QPCap(4, 4)))
    init = 0x1 | 0x8 | 0x10 | 0x20                    # STATE, ACCESS_FLAGS, PKEY_INDEX, PORT
    for attr in ({"qp_state": 1, "qp_access_flags": "x", "pkey_index": 0, "port_num": 1},
                 {"qp_state": 1, "qp_access_flags": 1 << 40, "pkey_index": 0, "port_num": 1},
                 {"qp_state": 1, "qp_access_flags": 0, "pkey_index": -1, "port_num": 1},
                 {"qp_state": 1, "qp_access_flags": 0, "pkey_index": 0, "port_num": 1.0},
                 {"qp_state": 1, "qp_access_flags": 0, "pkey_index": 0, "port_num": 1, "bogus": 1}):
        with pytest.raises(PyverbsRDMAError) as e:
            ctx.conn.call("modify_qp", qp=q.handle, mask=init, attr=attr)
        assert e.value.error_code == errno.EINVAL, attr
        assert q.query()[0].qp_state == 0                          # still RESET
    with pytest.raises(PyverbsRDMAError) as e:                      # a qkey that no DETH could carry
        ctx.conn.call("modify_qp", qp=q.handle, mask=0x40, attr={"qkey": 1 << 33})
    assert e.value.error_code == errno.EINVAL
    ctx.conn.call("modify_qp", qp=q.handle, mask=init, attr={"qp_state": 1, "qp_access_flags": 15,
                                                             "pkey_index": 0, "port_num": 1})
    assert q.query()[0].qp_state == 1
    ctx.close()
    assert_serves(daemon)


@pytest.mark.slow                   # an 8 s fuzz run
def test_fuzzed_requests_never_kill_the_daemon(daemon):
    """Random and mutated requests, some with fds, for a few seconds: each
    gets one errno reply; afterwards the daemon serves a normal client and
    holds no fd it did not hold before (beyond the objects it made)."""
    rng = random.Random(1234)
    before = nfds(daemon)
    c = Raw(daemon.run_dir)
    h = setup_objects(c)
    ops = [op for op in sorted(COMMANDS) if op not in ("link_delete", "link_add")]
    keys = ["pd", "cq", "qp", "srq", "mr", "mw", "ah", "channel", "capture", "length", "addr", "access",
            "type", "mask", "attr", "cap", "qp_type", "send_cq", "recv_cq", "max_wr", "max_sge",
            "srq_limit", "directions", "gid", "lid", "index", "port", "device", "name", "faults", "seed",
            "res", "dev", "start", "mode", "lqpn", "cntn", "hwcounters"]

    def value(depth=0):
        k = rng.randrange(12)
        if k < 4:
            return rng.choice([0, 1, 2, 3, 4, h["pd"], h["cq"], rng.getrandbits(rng.choice([8, 32, 64, 65])),
                               -rng.getrandbits(16)])
        if k == 4:
            return rng.choice(["", "rxe0", "lo", "qp", "auto", "x" * rng.randrange(100), "00" * 16])
        if k == 5:
            return rng.random() * 1e6
        if k == 6:
            return rng.choice([None, True, False])
        if k == 7 and depth < 3:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        if k == 8 and depth < 3:
            return {rng.choice(keys + ["qp_state", "qkey", "ah_attr", "dgid", "loss", "delay", "max_send_wr"]):
                    value(depth + 1) for _ in range(rng.randrange(5))}
        return rng.getrandbits(24)

    def some_fds():
        k = rng.randrange(6)
        if k == 0:
            return []
        out = []
        for _ in range(rng.randrange(1, 4)):
            t = rng.randrange(4)
            if t == 0:
                out.append(ring_fd(rng.choice([1, 4, 16]), rng.choice([8, 32, 64, 128, 8192]),
                                   seal=rng.random() < 0.8))
            elif t == 1:
                out.append(memfd(rng.choice([64, 4096, 1 << 16]), seal=rng.random() < 0.8))
            elif t == 2:
                out.append(os.eventfd(0, os.EFD_CLOEXEC))
            else:
                r_, w_ = os.pipe()
                os.close(w_)
                out.append(r_)
        return out

    end = time.monotonic() + 8
    n = 0
    errnos: dict[int, int] = {}
    while time.monotonic() < end:
        m = {"op": rng.choice(ops), "seq": n}
        for _ in range(rng.randrange(6)):
            m[rng.choice(keys)] = value()
        fds = some_fds()
        r = c.call(m.pop("op"), fds=fds, **{k: v for k, v in m.items() if k != "seq"})
        for fd in fds:
            os.close(fd)
        assert isinstance(r.get("errno"), int), (m, r)
        assert daemon.proc.poll() is None, f"softrdmad died on {m}"
        n += 1
        errnos[r["errno"]] = errnos.get(r["errno"], 0) + 1
    assert n > 200
    print("fuzz:", n, "requests; replies by errno:", errnos)
    assert errnos.get(0, 0) > 10 and errnos.get(errno.EINVAL, 0) > n // 4
    c.close()
    assert_serves(daemon)
    assert nfds(daemon, settle_to=before) == before  # the connection's objects are gone with it, fds too
    log = open(daemon.log.name).read()
    assert "Traceback" not in log, log[-3000:]
