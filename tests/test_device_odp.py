"""ODP end to end through a real softrdmad: MRs with IBV_ACCESS_ON_DEMAND
on the process's own memory (explicit: memory the library maps, or an
address the caller mmapped; implicit: the whole address space), RC
send/recv, RDMA WRITE/READ and atomics on them -- through the daemon's
loopback short cut and as packets --, SRQ receives, faults on unmapped
pages, ibv_advise_mr with its errnos, odp_caps, MRs on the caller's memory
without ODP (pinned semantics), and a process the daemon may not reach."""

from __future__ import annotations

import ctypes
import errno
import mmap
import os
import shutil
import signal
import subprocess
import sys

import pytest

from daemon_helpers import RawControl, default_daemon_in_shm, poll_wcs as wait
from rc_pair import rc_attr
from wait_helpers import DEADLINE_S, free_port, wait_for, wait_listening
from softrdma.enums import (
    IBV_ACCESS_HUGETLB, IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_ON_DEMAND, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_ATOMIC, IBV_ODP_SUPPORT_ATOMIC_WRITE, IBV_ODP_SUPPORT_FLUSH,
    IBV_ODP_SUPPORT_IMPLICIT,
    IBV_ODP_SUPPORT_READ, IBV_ODP_SUPPORT_RECV, IBV_ODP_SUPPORT_SEND, IBV_ODP_SUPPORT_SRQ_RECV,
    IBV_ODP_SUPPORT_WRITE, IBV_QPT_RC, IBV_REREG_MR_CHANGE_ACCESS, IBV_REREG_MR_CHANGE_TRANSLATION, IBV_ACCESS_ZERO_BASED, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_SUCCESS,
    IBV_WR_ATOMIC_CMP_AND_SWP, IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE, IBV_WR_SEND,
    _IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
    _IBV_ADVISE_MR_FLAG_FLUSH,
)
from softrdma.pyverbs import mem_alloc
from softrdma.pyverbs.mr import MR
from softrdma.verbs import cq as cq_m, device, dm as dm_m, pd as pd_m, qp as qp_m, srq as srq_m, wr as wr_m
from softrdma.verbs.errors import PyverbsError, PyverbsRDMAError
from shm_helpers import shm_mkdtemp

IPV4_GID = 1
ACC = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
ODP = ACC | IBV_ACCESS_ON_DEMAND
SIZE = 3 * mmap.PAGESIZE
SIZE_MAX = (1 << 64) - 1


@pytest.fixture(scope="module")
def daemon():
    with default_daemon_in_shm("odp") as d:
        yield d


@pytest.fixture(params=["loopback", "packets"])
def path(request, daemon):
    """The daemon's loopback short cut between two QPs of one device, or
    packets (a 50 us link delay makes every message go as packets)."""
    ctl = RawControl(daemon.run_dir)
    if request.param == "packets":
        ctl.ok("link_set", name="rxe0", faults={"delay": 0.00005})
    try:
        yield request.param
    finally:
        ctl.ok("link_set", name="rxe0", faults={})
        ctl.close()


class Side:
    def __init__(self, ctx, kind: str, srq: bool = False):
        self.pd = pd_m.PD(ctx)
        self.user = None
        if kind == "explicit":
            self.mr = MR(self.pd, SIZE, ODP)
        elif kind == "address":
            self.user = mem_alloc.mmap(length=SIZE)
            self.mr = MR(self.pd, SIZE, ODP, address=self.user)
        elif kind == "implicit":
            self.mr = MR(self.pd, SIZE, ODP, implicit=True)
        elif kind == "shm":                     # the library's shared memory
            self.mr = MR(self.pd, SIZE, ACC)
        else:                                   # on the caller's memory, no ODP
            self.user = mem_alloc.mmap(length=SIZE)
            self.mr = MR(self.pd, SIZE, ACC, address=self.user)
        self.cq = cq_m.CQ(ctx, 64)
        self.srq = srq_m.SRQ(self.pd, srq_m.SrqInitAttr(srq_m.SrqAttr(16, 1))) if srq else None
        self.qp = qp_m.QP(self.pd, qp_m.QPInitAttr(IBV_QPT_RC, scq=self.cq, rcq=self.cq, srq=self.srq,
                                                   cap=qp_m.QPCap(16, 16, 1, 1)))

    def sge(self, off: int, length: int) -> wr_m.SGE:
        return wr_m.SGE(self.mr.buf + off, length, self.mr.lkey)


def connected(ctx, kind: str, srq: bool = False):
    a, b = Side(ctx, kind, srq), Side(ctx, kind, srq)
    gid = ctx.query_gid(1, IPV4_GID)
    for x, y in ((a, b), (b, a)):
        x.qp.to_rts(rc_attr(y.qp.qp_num, gid, IPV4_GID, timeout=14, min_rnr_timer=12, access=ACC))
    return a, b


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]


def hole(length: int = mmap.PAGESIZE) -> int:
    """Address space the process holds but cannot access (PROT_NONE): what
    a device's page fault there finds, and nothing else will be mapped at."""
    return _libc.mmap(None, length, 0, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)


def post(side, wr_id, opcode, sge, rkey=0, raddr=0, add=0, swap=0):
    w = wr_m.SendWR(wr_id, opcode, 1, sg=[sge])
    if opcode in (IBV_WR_ATOMIC_FETCH_AND_ADD, IBV_WR_ATOMIC_CMP_AND_SWP):
        w.set_wr_atomic(rkey, raddr, add, swap)
    elif opcode != IBV_WR_SEND:
        w.set_wr_rdma(rkey, raddr)
    side.qp.post_send(w)
    (wc,) = wait(side.cq, 1)
    return wc.status


def test_odp_caps(daemon):
    with device.Context(name="rxe0") as ctx:
        caps = ctx.query_device_ex().odp_caps
    assert caps.general_caps == IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT
    rc = (IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ
          | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV | IBV_ODP_SUPPORT_FLUSH | IBV_ODP_SUPPORT_ATOMIC_WRITE)
    assert caps.rc_odp_caps == rc
    assert caps.ud_odp_caps == IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV
    assert not caps.uc_odp_caps & (IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC)


@pytest.mark.parametrize("kind", ["explicit", "address", "implicit", "pinned"])
def test_rc_send_write_read_atomic_on_process_memory(daemon, path, kind):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, kind)
        assert a.mr.length == (SIZE_MAX if kind == "implicit" else SIZE)
        # SEND/RECV, the receive buffer spanning a page boundary
        at = mmap.PAGESIZE - 100
        b.qp.post_recv(wr_m.RecvWR(7, 1, [b.sge(at, 300)]))
        a.mr.write(b"s" * 300, 300)
        assert post(a, 1, IBV_WR_SEND, a.sge(0, 300)) == IBV_WC_SUCCESS
        (rwc,) = wait(b.cq, 1)
        assert (rwc.wr_id, rwc.status, rwc.byte_len) == (7, IBV_WC_SUCCESS, 300)
        assert b.mr.read(300, at) == b"s" * 300
        # RDMA WRITE of two MTUs, then READ it back elsewhere
        a.mr.write(bytes(range(256)) * 8, 2048, 0)
        assert post(a, 2, IBV_WR_RDMA_WRITE, a.sge(0, 2048), b.mr.rkey, b.mr.buf + 4096) == IBV_WC_SUCCESS
        assert b.mr.read(2048, 4096) == bytes(range(256)) * 8
        assert post(a, 3, IBV_WR_RDMA_READ, a.sge(6144, 2048), b.mr.rkey, b.mr.buf + 4096) == IBV_WC_SUCCESS
        assert a.mr.read(2048, 6144) == bytes(range(256)) * 8
        # ATOMICs: the daemon's read-modify-write of the process's word
        b.mr.write((41).to_bytes(8, "little"), 8, 8192)
        assert post(a, 4, IBV_WR_ATOMIC_FETCH_AND_ADD, a.sge(64, 8), b.mr.rkey, b.mr.buf + 8192, add=1) \
            == IBV_WC_SUCCESS
        assert a.mr.read(8, 64) == (41).to_bytes(8, "little") and b.mr.read(8, 8192) == (42).to_bytes(8, "little")
        assert post(a, 5, IBV_WR_ATOMIC_CMP_AND_SWP, a.sge(72, 8), b.mr.rkey, b.mr.buf + 8192, add=42, swap=7) \
            == IBV_WC_SUCCESS
        assert a.mr.read(8, 72) == (42).to_bytes(8, "little") and b.mr.read(8, 8192) == (7).to_bytes(8, "little")
        for s in (a, b):
            if s.user:
                s.mr.close()
                mem_alloc.munmap(s.user, SIZE)


def test_pages_the_process_dropped_fault_back_in(daemon, path):
    """madvise(MADV_DONTNEED) between messages (the suite's
    force_page_faults): the next access faults the pages in again."""
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "address")
        for i in range(3):
            mem_alloc.madvise(a.mr.buf, SIZE)
            mem_alloc.madvise(b.mr.buf, SIZE)
            assert b.mr.read(8, 4096) == bytes(8)                 # dropped: zero-filled again
            b.qp.post_recv(wr_m.RecvWR(i, 1, [b.sge(4096, 64)]))
            a.mr.write(b"%d again" % i, 7)
            assert post(a, i, IBV_WR_SEND, a.sge(0, 7)) == IBV_WC_SUCCESS
            (rwc,) = wait(b.cq, 1)
            assert rwc.status == IBV_WC_SUCCESS and b.mr.read(7, 4096) == b"%d again" % i
        with pytest.raises(PyverbsRDMAError) as e:
            mem_alloc.madvise(a.mr.buf + 1, 8)                      # not page aligned
        assert e.value.error_code == errno.EINVAL


def test_srq_receive_into_odp_memory(daemon, path):
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "explicit", srq=True)
        b.srq.post_recv(wr_m.RecvWR(3, 1, [b.sge(0, 64)]))
        a.mr.write(b"into an SRQ", 11)
        assert post(a, 1, IBV_WR_SEND, a.sge(0, 11)) == IBV_WC_SUCCESS
        (rwc,) = wait(b.cq, 1)
        assert (rwc.wr_id, rwc.status) == (3, IBV_WC_SUCCESS) and b.mr.read(11, 0) == b"into an SRQ"


def test_unmapped_pages_fail_remote_and_local_access(daemon, path):
    """An implicit MR's keys are valid for any address, but an address the
    process has not mapped faults: a remote access error at the requester,
    a local protection error for a local SGE."""
    none = hole()
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "implicit")
        assert post(a, 1, IBV_WR_RDMA_WRITE, a.sge(0, 8), b.mr.rkey, none) == IBV_WC_REM_ACCESS_ERR
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "implicit")
        assert post(a, 2, IBV_WR_SEND, wr_m.SGE(none, 8, a.mr.lkey)) == IBV_WC_LOC_PROT_ERR


def test_advise_mr_prefetch_and_its_errnos(daemon):
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        mr = MR(pd, SIZE, ODP)
        sge = wr_m.SGE(mr.buf, SIZE, mr.lkey)
        for advice in (_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
                       _IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT):
            for flags in (_IBV_ADVISE_MR_FLAG_FLUSH, 0):
                assert pd.advise_mr(advice, flags, [sge]) == 0

        def err(advice=_IBV_ADVISE_MR_ADVICE_PREFETCH, flags=_IBV_ADVISE_MR_FLAG_FLUSH, sgl=(sge,), on=pd):
            with pytest.raises(PyverbsRDMAError) as e:
                on.advise_mr(advice, flags, list(sgl))
            assert str(e.value).startswith("Failed to advise MR")
            return e.value.error_code

        assert err(flags=2) == errno.EINVAL
        assert err(sgl=()) == errno.EINVAL
        assert err(advice=3) == errno.EOPNOTSUPP
        plain = MR(pd, 4096, ACC)
        assert err(sgl=[wr_m.SGE(plain.buf, 8, plain.lkey)]) == errno.EINVAL             # not ODP
        ro = MR(pd, 4096, IBV_ACCESS_ON_DEMAND)
        assert err(sgl=[wr_m.SGE(ro.buf, 8, ro.lkey)]) == errno.EINVAL                   # no local write
        assert err(sgl=[wr_m.SGE(mr.buf + SIZE - 4, 8, mr.lkey)]) == errno.EFAULT       # outside the MR
        assert err(on=pd_m.PD(ctx)) == errno.EINVAL                                      # another PD's MR
        imp = MR(pd, 0, ODP, implicit=True)
        assert (imp.buf, imp.length) == (0, SIZE_MAX)                    # pyverbs allocates nothing for length 0
        none = hole()
        assert err(sgl=[wr_m.SGE(none, 8, imp.lkey)]) == errno.EFAULT                   # no access there
        assert pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [wr_m.SGE(none, 8, imp.lkey)]) == 0   # async
        assert pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, _IBV_ADVISE_MR_FLAG_FLUSH,
                            [wr_m.SGE(none, 8, imp.lkey)]) == 0


def test_registration_rules(daemon):
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        none = hole()
        # ODP needs nothing accessible yet (rxe_odp_mr_init_user: a snapshot)
        MR(pd, 4096, ODP, address=none).close()
        # without ODP the pages are "pinned" now: EFAULT when they are not there
        with pytest.raises(PyverbsRDMAError) as e:
            MR(pd, 4096, ACC, address=none)
        assert e.value.error_code == errno.EFAULT
        # ... or not writable for a writable MR
        ro_addr = _libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        MR(pd, 4096, 0, address=ro_addr).close()
        with pytest.raises(PyverbsRDMAError) as e:
            MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE, address=ro_addr)
        assert e.value.error_code == errno.EFAULT
        # IBV_ACCESS_HUGETLB: pyverbs' buffer is 2 MiB pages, if the system has them
        huge = ODP | IBV_ACCESS_HUGETLB
        if _huge_pages():
            m = MR(pd, 4096, huge)
            assert m.buf % (2 << 20) == 0
            m.close()
        else:
            with pytest.raises(PyverbsError, match="Failed to allocate MR buffer of size 4096"):
                MR(pd, 4096, huge)
        # device memory cannot be on demand, and only an MR registered on demand is prefetched
        dm = dm_m.DM(ctx, dm_m.AllocDmAttr(4096))
        with pytest.raises(PyverbsRDMAError) as e:
            dm_m.DMMR(pd, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND, dm, 0)
        assert e.value.error_code == errno.EINVAL
        dm.close()
        shm = MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
        shm.rereg(IBV_REREG_MR_CHANGE_ACCESS, access=IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND)
        with pytest.raises(PyverbsRDMAError) as e:
            pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_FLAG_FLUSH, [wr_m.SGE(shm.buf, 8, shm.lkey)])
        assert e.value.error_code == errno.EINVAL
        # implicit: ODP only, and REMOTE_WRITE still needs LOCAL_WRITE
        with pytest.raises(PyverbsRDMAError) as e:
            MR(pd, 0, IBV_ACCESS_LOCAL_WRITE, implicit=True)
        assert e.value.error_code == errno.EINVAL
        with pytest.raises(PyverbsRDMAError) as e:
            MR(pd, 0, IBV_ACCESS_ON_DEMAND | IBV_ACCESS_REMOTE_WRITE, implicit=True)
        assert e.value.error_code == errno.EINVAL


def test_rereg_translation_onto_process_memory(daemon, path):
    """ibv_rereg_mr with a new translation: the MR (keys kept) is then on
    the process's pages -- pinned semantics unless the new access is on
    demand -- and traffic reaches them, not the old buffer."""
    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "shm")
        keys = (b.mr.lkey, b.mr.rkey)
        old = b.mr.buf
        mem = ctypes.create_string_buffer(SIZE)
        new = ctypes.addressof(mem)
        b.mr.rereg(IBV_REREG_MR_CHANGE_TRANSLATION, addr=new, length=SIZE)
        assert (b.mr.lkey, b.mr.rkey, b.mr.buf, b.mr.length) == (*keys, new, SIZE)
        a.mr.write(b"moved!", 6)
        assert post(a, 1, IBV_WR_RDMA_WRITE, a.sge(0, 6), b.mr.rkey, old) == IBV_WC_REM_ACCESS_ERR

    with device.Context(name="rxe0") as ctx:
        a, b = connected(ctx, "shm")
        mem = ctypes.create_string_buffer(SIZE)
        new = ctypes.addressof(mem)
        b.mr.rereg(IBV_REREG_MR_CHANGE_TRANSLATION, addr=new, length=SIZE)
        a.mr.write(b"moved!", 6)
        assert post(a, 1, IBV_WR_RDMA_WRITE, a.sge(0, 6), b.mr.rkey, new + 100) == IBV_WC_SUCCESS
        assert mem.raw[100:106] == b"moved!" and b.mr.read(6, 100) == b"moved!"
        # on demand: the new range need not be mapped; a fault there is a remote access error
        none = hole()
        b.mr.rereg(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, addr=none, length=4096, access=ODP)
        assert post(a, 2, IBV_WR_RDMA_WRITE, a.sge(0, 6), b.mr.rkey, none) == IBV_WC_REM_ACCESS_ERR


def test_rereg_rules(daemon):
    with device.Context(name="rxe0") as ctx:
        pd = pd_m.PD(ctx)
        mr = MR(pd, 4096, ACC)

        def err(flags, **kw):
            with pytest.raises(PyverbsRDMAError) as e:
                mr.rereg(flags, **kw)
            return str(e.value), e.value.error_code

        # pinned semantics: unmapped (EFAULT), or read-only for a writable MR (EFAULT)
        text, code = err(IBV_REREG_MR_CHANGE_TRANSLATION, addr=hole(), length=4096)
        assert code == errno.EFAULT and text.startswith("Failed to rereg MR: IBV_REREG_MR_ERR_CMD")
        ro_addr = _libc.mmap(None, 4096, mmap.PROT_READ, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        text, code = err(IBV_REREG_MR_CHANGE_TRANSLATION, addr=ro_addr, length=4096)
        assert code == errno.EFAULT and text.startswith("Failed to rereg MR: IBV_REREG_MR_ERR_CMD")
        # ... but a read-only MR may be there
        mr.rereg(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, addr=ro_addr, length=4096,
                 access=IBV_ACCESS_REMOTE_READ)
        assert mr.buf == ro_addr
        # the kernel's checks: flags 0 (EINVAL), a flag it does not take (EOPNOTSUPP), wrapping
        assert err(0)[1] == errno.EINVAL
        assert err(8)[1] == errno.EOPNOTSUPP                   # IBV_REREG_MR_KEEP_VALID
        assert err(IBV_REREG_MR_CHANGE_TRANSLATION, addr=SIZE_MAX - 10, length=4096)[1] == errno.EINVAL
        # libibverbs' own: no address or length for a translation
        text, code = err(IBV_REREG_MR_CHANGE_TRANSLATION, addr=0, length=4096)
        assert code == errno.EINVAL and "IBV_REREG_MR_ERR_INPUT" in text
        # an access rereg on demand does not make the registration one (rxe), a translation does
        shm = MR(pd, 4096, IBV_ACCESS_LOCAL_WRITE)
        mem = ctypes.create_string_buffer(4096)
        shm.rereg(IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS, addr=ctypes.addressof(mem),
                  length=4096, access=IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND)
        assert pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH, _IBV_ADVISE_MR_FLAG_FLUSH,
                            [wr_m.SGE(shm.buf, 8, shm.lkey)]) == 0
        shm.write(b"abcd", 4)
        assert mem.raw[:4] == b"abcd"


def _huge_pages() -> int:
    try:
        with open("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages") as f:
            return int(f.read())
    except OSError:
        return 0


def test_a_process_the_daemon_may_not_reach_has_no_odp(tmp_path):
    """A daemon without CAP_SYS_PTRACE (dropped from its bounding set
    before it starts) may not reach a process that has it: no ODP caps,
    ON_DEMAND registration and advise_mr are EOPNOTSUPP."""
    run = shm_mkdtemp("softrdma-odp-denied-")
    code = ("import ctypes, os, sys; ctypes.CDLL(None).prctl(24, 19, 0, 0, 0);"     # PR_CAPBSET_DROP CAP_SYS_PTRACE
            "os.execv(sys.executable, [sys.executable, '-m', 'softrdma', 'daemon', '-f', '--run-dir', %r,"
            " '--port', '0', '--device', 'rxe0:lo'])" % run)
    log = open(os.path.join(run, "log"), "w")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=subprocess.STDOUT)
    old = os.environ.get("SOFTRDMA_RUN")
    try:
        wait_for(lambda: os.path.exists(os.path.join(run, "softrdmad.sock"))
                 and os.path.exists(os.path.join(run, "softrdmad.pid")), DEADLINE_S, "softrdmad", proc=proc)
        os.environ["SOFTRDMA_RUN"] = run
        with device.Context(name="rxe0") as ctx:
            caps = ctx.query_device_ex().odp_caps
            assert (caps.general_caps, caps.rc_odp_caps, caps.ud_odp_caps) == (0, 0, 0)
            pd = pd_m.PD(ctx)
            with pytest.raises(PyverbsRDMAError) as e:
                MR(pd, 4096, ODP)
            assert e.value.error_code == errno.EOPNOTSUPP
            plain = MR(pd, 4096, ACC)                 # shared memory MRs do not need it
            mem = ctypes.create_string_buffer(4096)
            for flags, acc in ((IBV_REREG_MR_CHANGE_TRANSLATION, 0), (IBV_REREG_MR_CHANGE_ACCESS, ODP)):
                with pytest.raises(PyverbsRDMAError) as e:          # nor may an MR move onto its memory
                    plain.rereg(flags, addr=ctypes.addressof(mem) if acc == 0 else 0,
                                length=4096 if acc == 0 else 0, access=acc)
                assert e.value.error_code == errno.EOPNOTSUPP
            with pytest.raises(PyverbsRDMAError) as e:
                pd.advise_mr(_IBV_ADVISE_MR_ADVICE_PREFETCH, 0, [wr_m.SGE(plain.buf, 8, plain.lkey)])
            assert e.value.error_code == errno.EOPNOTSUPP
        # the tools say so with the real tools' messages (and why, after them)
        env = {**os.environ, "SOFTRDMA_RUN": run, "SOFTRDMA_AUTOSTART": "0", "SOFTRDMA_PROGRESS": "0"}
        r = subprocess.run([sys.executable, "-m", "softrdma", "ibv_rc_pingpong", "-d", "rxe0", "-g", "1", "-o"],
                           capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 1
        assert r.stderr.startswith("The device isn't ODP capable or does not support RC send and receive with"
                                   " ODP\nibv_rc_pingpong: -o: softrdmad may not reach this process's memory"), r.stderr
        port = str(free_port())
        srv = subprocess.Popen([sys.executable, "-m", "softrdma", "ib_write_bw", "-d", "rxe0", "-p", port, "-n", "5"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        try:
            wait_listening(int(port), srv)
            r = subprocess.run([sys.executable, "-m", "softrdma", "ib_write_bw", "-d", "rxe0", "-p", port, "-n",
                                "5", "--odp", "127.0.0.1"], capture_output=True, text=True, timeout=60, env=env)
            assert r.returncode == 1
            assert r.stderr.startswith(" The device does not support On-Demand Paging.\nfailed to create mr\n"), \
                r.stderr
        finally:
            srv.kill()
            srv.communicate()
    finally:
        if old is None:
            os.environ.pop("SOFTRDMA_RUN", None)
        else:
            os.environ["SOFTRDMA_RUN"] = old
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.close()
        shutil.rmtree(run, ignore_errors=True)
