"""ibv_import_device / ibv_import_pd / ibv_import_mr / ibv_import_dm end to
end through a softrdmad: Context(cmd_fd=dup of another's cmd_fd) shares
that context's connection (the uverbs file), so its objects are imported
by handle; imports never destroy what they import; the connection lives
until the last context on it closes; fds that are no context of this
process are refused."""

from __future__ import annotations

import errno
import os
import socket

import pytest

from daemon_helpers import daemon_in_shm, resources
from rc_pair import ACC, ipv4_gid_index, rc_attr
from softrdma.pyverbs import enums as e
from softrdma.pyverbs.cq import CQ
from softrdma.pyverbs.device import DM, AllocDmAttr, Context
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
from softrdma.pyverbs.qp import QP, QPCap, QPInitAttr
from softrdma.pyverbs.wr import SGE, SendWR


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("import") as d:
        yield d.run_dir


@pytest.fixture
def env(run_dir, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    return run_dir


def _count(run_dir, kind):
    return sum(1 for r in resources(run_dir) if r["kind"] == kind)


def test_imported_context_shares_objects_and_traffic(env):
    ctx = Context(name="rxe0")
    pd = PD(ctx)
    mr = MR(pd, 4096, ACC)
    mr.write(b"imported!" * 4, 36)
    ictx = Context(cmd_fd=os.dup(ctx.cmd_fd))
    assert ictx.cmd_fd != ctx.cmd_fd and ictx.name == ctx.name
    ipd = PD(ictx, handle=pd.handle)
    imr = MR(ipd, handle=mr.handle, address=mr.buf)
    assert (imr.handle, imr.lkey, imr.rkey, imr.length) == (mr.handle, mr.lkey, mr.rkey, mr.length)
    assert imr.read(36, 0) == b"imported!" * 4
    assert MR(ipd, handle=mr.handle).buf == 0          # ibv_import_mr: no address
    # a QP on the imported context and PD, writing into the original MR with its rkey
    cq, icq = CQ(ctx, 8), CQ(ictx, 8)
    cap = QPCap(4, 4, 1, 1)
    a = QP(ipd, QPInitAttr(e.IBV_QPT_RC, None, icq, icq, None, cap))
    b = QP(pd, QPInitAttr(e.IBV_QPT_RC, None, cq, cq, None, cap))
    gi = ipv4_gid_index(ctx)
    gid = ctx.query_gid(1, gi)
    a.to_rts(rc_attr(b.qp_num, gid, gi))
    b.to_rts(rc_attr(a.qp_num, gid, gi))
    w = SendWR(7, e.IBV_WR_RDMA_WRITE, 1, sg=[SGE(imr.buf, 9, imr.lkey)])
    w.set_wr_rdma(rkey=imr.rkey, addr=mr.buf + 100)
    a.post_send(w)
    while True:
        n, wcs = icq.poll()
        if n:
            break
    assert wcs[0].status == e.IBV_WC_SUCCESS and mr.read(9, 100) == b"imported!"
    # unimport forgets, never destroys
    qps = _count(env, "qp")
    a.close()
    imr.unimport()
    ipd.unimport()
    assert _count(env, "qp") == qps - 1 and _count(env, "mr") == 1 and _count(env, "pd") == 1
    # the original context goes; the imported one keeps the connection and its objects
    b.close(), cq.close()
    ctx.close()
    assert ictx.query_port(1).state == e.IBV_PORT_ACTIVE
    assert _count(env, "cq") == 1                       # the imported context's CQ
    icq.close()
    ictx.close()
    assert _count(env, "cq") == 0 and _count(env, "pd") == 0


def test_imported_dm_is_the_same_memory(env):
    with Context(name="rxe0") as ctx:
        dm = DM(ctx, AllocDmAttr(length=4096))
        with Context(cmd_fd=os.dup(ctx.cmd_fd)) as ictx:
            idm = DM(ictx, handle=dm.handle)
            assert idm.length == 4096
            dm.copy_to_dm(0, b"\xab" * 4096, 4096)
            assert idm.copy_from_dm(0, 4096) == b"\xab" * 4096
            idm.copy_to_dm(8, b"back", 4)
            assert dm.copy_from_dm(8, 4) == b"back"
            idm.unimport()
            assert dm.copy_from_dm(0, 4) == b"\xab" * 4    # still the original's
        dm.close()


def test_bad_handles_and_fds(env):
    with Context(name="rxe0") as ctx:
        with Context(cmd_fd=os.dup(ctx.cmd_fd)) as ictx:
            for make, what in ((lambda: PD(ictx, handle=0xFFFF), "Failed to import PD"),
                               (lambda: MR(PD(ictx), handle=0xFFFF), "Failed to import MR"),
                               (lambda: DM(ictx, handle=0xFFFF), "Failed to import DM")):
                with pytest.raises(PyverbsRDMAError, match=what) as ex:
                    make()
                assert ex.value.error_code == errno.EINVAL
        r, w = os.pipe()
        try:
            with pytest.raises(PyverbsRDMAError) as ex:
                Context(cmd_fd=r)
            assert ex.value.error_code == errno.EINVAL
        finally:
            os.close(r), os.close(w)
        with pytest.raises(PyverbsRDMAError) as ex:
            Context(cmd_fd=1 << 20)
        assert ex.value.error_code == errno.EBADF
        # a connection to the daemon that is no context of this process's
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        s.connect(os.path.join(env, "softrdmad.sock"))
        try:
            with pytest.raises(PyverbsRDMAError, match="not a context of this process") as ex:
                Context(cmd_fd=s.fileno())
            assert ex.value.error_code == errno.EOPNOTSUPP
        finally:
            s.close()
        assert ctx.query_port(1).state == e.IBV_PORT_ACTIVE
