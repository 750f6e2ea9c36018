"""The device's limits, end to end through a softrdmad: what query_device
advertises is what the daemon enforces, with the kernel's errnos.

* ``reg_mr`` with REMOTE_WRITE or REMOTE_ATOMIC but no LOCAL_WRITE: EINVAL
  (ib_check_mr_access);
* object counts (max_qp, max_cq, max_mr, max_pd, max_srq, max_ah, max_mw)
  over every context of the device: EINVAL once full (rxe's
  __rxe_add_to_pool), room again once one is destroyed.  The defaults are
  in the hundred thousands, so these run on a daemon whose limits an
  administrator lowered (``softrdmad --limit NAME=N``, a feature of its
  own: query_device then reports the lowered values);
* max_cqe, max_mr_size, max_sge, max_inline_data and SRQ sizes at the
  defaults: one above the limit fails with EINVAL, also when a raw control
  request skips the library's own check;
* an unprivileged user (uid 65534, no CAP_IPC_LOCK) pins at most its
  RLIMIT_MEMLOCK in MRs, summed over all its processes (ENOMEM), none with
  RLIMIT_MEMLOCK 0 (EPERM), and opens at most max_contexts_per_user
  contexts (EMFILE);
* post_send/post_recv refuse a work request out of range with EINVAL (an
  unknown opcode, an SGE length < 0 or >= 2^32, inline data above
  max_inline_data) -- never a struct.error -- and req_notify on a closed CQ
  raises PyverbsError.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from softrdma.uapi.shm import Ring
from softrdma.enums import (
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ, IBV_ACCESS_REMOTE_WRITE,
    IBV_QPT_RC, IBV_QPT_UD, IBV_SEND_INLINE, IBV_SEND_SIGNALED, IBV_WR_SEND,
)
from softrdma.pyverbs.addr import AH, AHAttr, GlobalRoute
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.mr import MR, MW
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsError, PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
from softrdma.pyverbs.srq import SRQ, SrqAttr, SrqInitAttr
from softrdma.pyverbs.wr import SGE, RecvWR, SendWR
from shm_helpers import shm_mkdtemp

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
NOBODY = 65534


def _shm_dir(tag: str) -> str:
    return shm_mkdtemp(f"softrdma-{tag}-")


class _Daemon:
    """A softrdmad with extra options (``--limit``), optionally as another
    user; ready once its pid file exists (written after the socket listens)."""

    def __init__(self, run_dir: str, *extra: str, user: int | None = None, python=(sys.executable,), env=None):
        self.run_dir = run_dir
        self.log = open(os.path.join(run_dir, "test-daemon.log"), "w")
        args = [*python, "-m", "softrdma", "daemon", "-f", "--run-dir", run_dir, "--port", "0",
                "--device", "rxe0:lo", *extra]
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, user=user, env=env)
        end = time.monotonic() + 60
        while not os.path.exists(os.path.join(run_dir, "softrdmad.pid")):
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise RuntimeError("softrdmad did not start: " + open(self.log.name).read())
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def daemon(monkeypatch):
    """A softrdmad at the default limits; this process's contexts use it."""
    run = _shm_dir("limits")
    try:
        d = _Daemon(run)
        monkeypatch.setenv("SOFTRDMA_RUN", run)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        try:
            yield d
        finally:
            d.stop()
    finally:
        shutil.rmtree(run, ignore_errors=True)


LOWERED = {"max_qp": 3, "max_cq": 4, "max_mr": 3, "max_pd": 3, "max_srq": 2, "max_ah": 2, "max_mw": 2}


@pytest.fixture
def lowered(monkeypatch):
    run = _shm_dir("limits-low")
    try:
        d = _Daemon(run, *[a for k, v in LOWERED.items() for a in ("--limit", f"{k}={v}")])
        monkeypatch.setenv("SOFTRDMA_RUN", run)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        try:
            yield d
        finally:
            d.stop()
    finally:
        shutil.rmtree(run, ignore_errors=True)


def _errno(excinfo) -> int:
    return excinfo.value.error_code


# ------------------------------------------------------------------ access rule
def test_reg_mr_remote_write_or_atomic_needs_local_write(daemon):
    with Context(name="rxe0") as ctx:
        pd = PD(ctx)
        for access in (IBV_ACCESS_REMOTE_WRITE, IBV_ACCESS_REMOTE_ATOMIC,
                       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC):
            with pytest.raises(PyverbsRDMAError) as e:
                MR(pd, 4096, access)
            assert _errno(e) == errno.EINVAL, access
        for access in (IBV_ACCESS_REMOTE_READ, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC, 0):
            MR(pd, 4096, access).close()


# ------------------------------------------------------------------ object counts
def _ah_attr(ctx):
    return AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, 0), sgid_index=0), is_global=1, port_num=1)


def _make(kind: str, ctx, pd, cq):
    if kind == "max_pd":
        return PD(ctx)
    if kind == "max_cq":
        return CQ(ctx, 8)
    if kind == "max_mr":
        return MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
    if kind == "max_qp":
        return QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    if kind == "max_srq":
        return SRQ(pd, SrqInitAttr(SrqAttr(max_wr=4, max_sge=1)))
    if kind == "max_ah":
        return AH(pd, _ah_attr(ctx))
    if kind == "max_mw":
        return MW(pd, 2)
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", sorted(LOWERED))
def test_object_limit_counts_the_whole_device(lowered, kind):
    """The limit holds over every context of the device (two connections
    here): the next object fails with EINVAL, and there is room again once
    one is gone."""
    limit = LOWERED[kind]
    a, b = Context(name="rxe0"), Context(name="rxe0")
    try:
        assert getattr(a.query_device(), kind) == limit
        # each context has a PD (and one CQ) for its objects: they count too
        pa, pb = PD(a), PD(b)
        ca = CQ(a, 8) if kind != "max_cq" else None
        cb = CQ(b, 8) if kind != "max_cq" else None
        have = {"max_pd": 2, "max_cq": 0}.get(kind, 0)
        made = []
        for i in range(limit - have):
            ctx, pd, cq = (a, pa, ca) if i % 2 else (b, pb, cb)
            made.append(_make(kind, ctx, pd, cq))
        with pytest.raises(PyverbsRDMAError) as e:
            _make(kind, a, pa, ca)
        assert _errno(e) == errno.EINVAL
        assert kind in str(e.value)
        if made:
            made.pop().close()
        else:                                            # the PDs themselves were the limit
            pb.close()
            pb = None
        _make(kind, a, pa, ca)                           # room for one again
        with pytest.raises(PyverbsRDMAError):
            _make(kind, b, pb or pa, cb)
    finally:
        b.close()
        a.close()


def test_a_closed_context_gives_its_objects_back(lowered):
    """Objects die with their context (the process): the count follows."""
    for _ in range(2):
        ctx = Context(name="rxe0")
        pds = [PD(ctx) for _ in range(LOWERED["max_pd"])]
        assert len(pds) == LOWERED["max_pd"]
        ctx.close()


# ------------------------------------------------------------------ sizes at the defaults
def test_max_cqe(daemon):
    with Context(name="rxe0") as ctx:
        max_cqe = ctx.query_device().max_cqe
        assert max_cqe == (1 << 15) - 1
        CQ(ctx, max_cqe).close()
        with pytest.raises(PyverbsRDMAError) as e:
            CQ(ctx, max_cqe + 1)
        assert _errno(e) == errno.EINVAL
        # the daemon's own check, for a client that skips the library's
        ring = Ring.create(max_cqe + 2, 64, "limits-cq")
        try:
            with pytest.raises(PyverbsRDMAError) as e:
                ctx.conn.call("create_cq", fds=[ring.fd], cqe=ring.nslots - 1, channel=None)
            assert _errno(e) == errno.EINVAL
        finally:
            ring.close()


def test_max_mr_size(daemon):
    """32 TiB does not register: max_mr_size is the host's memory, which
    backs every MR."""
    with Context(name="rxe0") as ctx:
        a = ctx.query_device()
        assert a.max_mr_size == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        pd = PD(ctx)
        with pytest.raises(PyverbsRDMAError) as e:
            MR(pd, 32 << 40, IBV_ACCESS_LOCAL_WRITE)
        assert _errno(e) == errno.EINVAL
        # and the daemon itself refuses it, before it maps anything
        fd = os.memfd_create("limits-mr", os.MFD_CLOEXEC)
        try:
            os.ftruncate(fd, 4096)
            with pytest.raises(PyverbsRDMAError) as e:
                ctx.conn.call("reg_mr", fds=[fd], pd=pd.handle, length=a.max_mr_size + 1,
                              access=int(IBV_ACCESS_LOCAL_WRITE), addr=1 << 20)
            assert _errno(e) == errno.EINVAL
        finally:
            os.close(fd)


def test_qp_and_srq_sizes(daemon):
    with Context(name="rxe0") as ctx:
        a = ctx.query_device()
        pd, cq = PD(ctx), CQ(ctx, 8)
        for cap in (QPCap(max_send_sge=a.max_sge + 1), QPCap(max_recv_sge=a.max_sge + 1),
                    QPCap(max_inline_data=257), QPCap(max_send_wr=a.max_qp_wr + 1)):
            with pytest.raises(PyverbsRDMAError) as e:
                QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
            assert _errno(e) == errno.EINVAL, vars(cap)
        QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq,
                          cap=QPCap(max_send_sge=a.max_sge, max_inline_data=256))).close()
        for attr in (SrqAttr(max_wr=4, max_sge=a.max_srq_sge + 1), SrqAttr(max_wr=0, max_sge=1)):
            with pytest.raises(PyverbsRDMAError) as e:
                SRQ(pd, SrqInitAttr(attr))
            assert _errno(e) == errno.EINVAL


def test_lowered_sizes_are_reported_and_enforced(monkeypatch):
    run = _shm_dir("limits-size")
    d = None
    try:
        d = _Daemon(run, "--limit", "max_sge=2", "--limit", "max_inline_data=64", "--limit", "max_cqe=100",
                    "--limit", "max_mr_size=65536")
        monkeypatch.setenv("SOFTRDMA_RUN", run)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        with Context(name="rxe0") as ctx:
            a = ctx.query_device()
            assert (a.max_sge, a.max_cqe, a.max_mr_size) == (2, 100, 65536)
            pd = PD(ctx)
            cq = CQ(ctx, 100)
            for cap in (QPCap(max_send_sge=3), QPCap(max_inline_data=65)):
                with pytest.raises(PyverbsRDMAError) as e:
                    QP(pd, QPInitAttr(qp_type=IBV_QPT_RC, scq=cq, rcq=cq, cap=cap))
                assert _errno(e) == errno.EINVAL
            with pytest.raises(PyverbsRDMAError) as e:
                CQ(ctx, 101)
            assert _errno(e) == errno.EINVAL
            MR(pd, 65536, IBV_ACCESS_LOCAL_WRITE).close()
            with pytest.raises(PyverbsRDMAError) as e:
                MR(pd, 65537, IBV_ACCESS_LOCAL_WRITE)
            assert _errno(e) == errno.EINVAL
    finally:
        if d is not None:
            d.stop()
        shutil.rmtree(run, ignore_errors=True)


def test_bad_limit_option_is_one_line():
    out = subprocess.run([sys.executable, "-m", "softrdma", "daemon", "-f", "--limit", "max_bogus=3"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "unknown limit 'max_bogus=3'" in out.stderr and "Traceback" not in out.stderr


# ------------------------------------------------------------------ the library's checks
def test_post_send_and_recv_refuse_bad_work_requests(daemon):
    with Context(name="rxe0") as ctx:
        pd, cq = PD(ctx), CQ(ctx, 16)
        mr = MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
        qp = QP(pd, QPInitAttr(qp_type=IBV_QPT_UD, scq=cq, rcq=cq,
                               cap=QPCap(max_send_wr=2, max_recv_wr=2, max_inline_data=64)))
        # INIT: receives may be posted (in RESET the device takes them as errors, freeing their slots)
        attr = QPAttr()
        attr.qkey = 0x11111111
        qp.to_init(attr)
        bad_sends = [
            SendWR(opcode=99, sg=[SGE(mr.buf, 8, mr.lkey)]),
            SendWR(opcode=-1, sg=[SGE(mr.buf, 8, mr.lkey)]),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, -1, mr.lkey)]),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, 1 << 32, mr.lkey)]),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, 8, 1 << 32)]),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, 1 << 40, mr.lkey)],
                   send_flags=IBV_SEND_INLINE | IBV_SEND_SIGNALED),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, -1, mr.lkey)], send_flags=IBV_SEND_INLINE),
            SendWR(opcode=IBV_WR_SEND, sg=[SGE(mr.buf, 65, mr.lkey)], send_flags=IBV_SEND_INLINE),
            SendWR(wr_id=1 << 64, opcode=IBV_WR_SEND, sg=[SGE(mr.buf, 8, mr.lkey)]),
        ]
        for wr in bad_sends:
            with pytest.raises(PyverbsRDMAError) as e:
                qp.post_send(wr)
            assert _errno(e) == errno.EINVAL, vars(wr)
        for wr in (RecvWR(sg=[SGE(mr.buf, -1, mr.lkey)]), RecvWR(sg=[SGE(mr.buf, 1 << 32, mr.lkey)]),
                   RecvWR(wr_id=-1, sg=[SGE(mr.buf, 8, mr.lkey)])):
            with pytest.raises(PyverbsRDMAError) as e:
                qp.post_recv(wr)
            assert _errno(e) == errno.EINVAL
        # nothing was taken from the queues: both still hold max_*_wr good ones
        for i in range(2):
            qp.post_recv(RecvWR(wr_id=i, sg=[SGE(mr.buf, 8, mr.lkey)]))
        with pytest.raises(PyverbsRDMAError) as e:
            qp.post_recv(RecvWR(sg=[SGE(mr.buf, 8, mr.lkey)]))
        assert _errno(e) == errno.ENOMEM
        qp.close()


def test_req_notify_on_a_closed_cq_is_a_pyverbs_error(daemon):
    with Context(name="rxe0") as ctx:
        cq = CQ(ctx, 4)
        cq.req_notify()
        cq.close()
        with pytest.raises(PyverbsError) as e:
            cq.req_notify()
        assert not isinstance(e.value, ValueError)


# ------------------------------------------------------------------ an unprivileged user
def _python_for(uid: int) -> tuple[list[str], dict]:
    """An interpreter ``uid`` may run with this checkout's packages: ours
    if it can, else the system's with our import path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in [SRC, *sys.path] if p and os.path.isdir(p))}
    why = []
    for exe in (sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"):
        try:
            r = subprocess.run([exe, "-c", "import softrdma, pyroute2"], user=uid, env=env, cwd="/",
                               capture_output=True, timeout=60)
        except OSError as e:                      # e.g. an interpreter under /root
            why.append(f"{exe}: {e.strerror}")
            continue
        if r.returncode == 0:
            return [exe], env
        why.append(f"{exe}: {r.stderr.decode()[-200:]}")
    pytest.fail(f"no Python interpreter that uid {uid} may run imports softrdma: {why}")


_CLIENT = r"""
import ctypes, errno, mmap, resource, sys
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))   # lowering needs no privilege
ctx = Context(name="rxe0")
pd = PD(ctx)
mrs = []
moved = []                                   # memory an MR was moved onto (kept mapped)
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == "mr":
            mrs.append(MR(pd, int(cmd[1]), 1))
        elif cmd[0] == "free":
            mrs.pop(0).close()
        elif cmd[0] == "move":               # ibv_rereg_mr of the first MR onto N bytes of ours
            m = mmap.mmap(-1, int(cmd[1]))
            moved.append((m, ctypes.c_char.from_buffer(m)))
            mrs[0].rereg(1, None, ctypes.addressof(moved[-1][1]), int(cmd[1]), 0)   # CHANGE_TRANSLATION
        elif cmd[0] == "ctx":
            Context(name="rxe0")
        print("ok", flush=True)
    except PyverbsRDMAError as e:
        print("errno", errno.errorcode[e.error_code], flush=True)
"""


class _Client:
    def __init__(self, py, env, limit: int):
        self.p = subprocess.Popen([*py, "-c", _CLIENT, str(limit)], user=NOBODY, env=env, cwd="/",
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def do(self, cmd: str) -> str:
        self.p.stdin.write(cmd + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline().strip()
        assert line, f"the client died on {cmd!r}"
        return line

    def close(self) -> None:
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()


def test_unprivileged_user_memlock_and_contexts():
    """uid 65534 (no CAP_IPC_LOCK): MRs pin pages against its
    RLIMIT_MEMLOCK, summed over the user's processes (ib_umem_get: ENOMEM
    past it, EPERM with a limit of 0); at most max_contexts_per_user
    contexts (EMFILE).  softrdmad runs as that user too (it serves its own
    user's processes)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to switch to uid 65534")
    py, env = _python_for(NOBODY)
    run = _shm_dir("limits-nobody")
    d = None
    clients = []
    try:
        os.chown(run, NOBODY, NOBODY)
        d = _Daemon(run, "--limit", "max_contexts_per_user=3", user=NOBODY, python=py, env=env)
        env = {**env, "SOFTRDMA_RUN": run, "SOFTRDMA_AUTOSTART": "0"}
        page = os.sysconf("SC_PAGE_SIZE")
        a = _Client(py, env, 16 * page)
        clients.append(a)
        assert a.do(f"mr {8 * page}") == "ok"
        assert a.do(f"mr {8 * page}") == "ok"
        assert a.do("mr 1") == "errno ENOMEM"            # 16 pages pinned: not one more
        b = _Client(py, env, 16 * page)                   # the same user, another process
        clients.append(b)
        assert b.do(f"mr {page}") == "errno ENOMEM"
        assert a.do("free") == "ok"                       # 8 pages back
        assert b.do(f"mr {8 * page}") == "ok"
        assert a.do(f"mr {page}") == "errno ENOMEM"
        # a new translation pins its pages before the old ones go (ib_umem_get, then
        # ib_umem_release): a's 8-page MR may move onto 8 pages only with 8 more free
        assert a.do(f"move {8 * page}") == "errno ENOMEM"
        assert b.do("free") == "ok"                       # 8 pages back
        assert a.do(f"move {2 * page}") == "ok"          # 8 + 2 pinned, then 2
        assert a.do(f"mr {14 * page}") == "ok"           # the old 8 came back: 16
        assert a.do("mr 1") == "errno ENOMEM"
        z = _Client(py, env, 0)                           # RLIMIT_MEMLOCK 0: can_do_mlock() fails
        clients.append(z)
        assert z.do(f"mr {page}") == "errno EPERM"
        # three contexts are open (a, b, z): the fourth is one too many
        assert z.do("ctx") == "errno EMFILE"
        z.close()
        assert a.do("ctx") == "ok"                        # z's went with its process
    finally:
        for c in clients:
            c.close()
        if d is not None:
            d.stop()
        shutil.rmtree(run, ignore_errors=True)
