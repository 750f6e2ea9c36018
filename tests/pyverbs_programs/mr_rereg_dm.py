"""An ordinary pyverbs program using MR re-registration and device memory
the way rdma-core's tests/test_mr.py does: ibv_rereg_mr's access, PD and
translation changes, each checked with RDMA WRITEs (refused, then landing
where the new registration says), its input and device errors; DM
allocation from the device's pool, memcpy to/from it, and a DMMR reached
by an RDMA WRITE and an RDMA READ and used as a local SGE.  It imports
``pyverbs``, not softrdma."""

import ctypes
import errno
import sys

import pyverbs.enums as e
from pyverbs.device import DM, AllocDmAttr, Context
from pyverbs.mr import DMMR, MR, MW, MWBind, MWBindInfo
from pyverbs.pd import PD
from pyverbs.pyverbs_error import PyverbsRDMAError
from pyverbs.wr import SGE, SendWR

import rc_loopback                       # (beside this program)

SIZE = 4096
RW = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
ctx, gid_index, gid = rc_loopback.open_first_device()
pd = PD(ctx)
client_mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE)


def pair():
    return rc_loopback.pair(ctx, pd, gid_index, gid, RW | e.IBV_ACCESS_REMOTE_READ)


def rdma(op, rkey, raddr, sge=None):
    (client, server), (ccq, scq) = pair()
    w = SendWR(wr_id=1, opcode=op, num_sge=1, sg=[sge or SGE(client_mr.buf, 64, client_mr.lkey)])
    w.set_wr_rdma(rkey=rkey, addr=raddr)
    client.post_send(w)
    return rc_loopback.status(ccq)


def check(got, want, what):
    if got != want:
        sys.exit(f"{what}: {got!r}, expected {want!r}")


def refused(fn, text, err, what):
    try:
        fn()
    except PyverbsRDMAError as ex:
        check((text in str(ex), ex.error_code), (True, err), f"{what} ({ex})")
    else:
        sys.exit(f"{what}: not refused")


# -- rereg: access
server_mr = MR(pd, SIZE, e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_MW_BIND)
keys = (server_mr.lkey, server_mr.rkey)
client_mr.write(b"A" * 64, 64)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, server_mr.buf), e.IBV_WC_REM_ACCESS_ERR, "write before rereg")
server_mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, RW | e.IBV_ACCESS_MW_BIND)
check((server_mr.lkey, server_mr.rkey), keys, "keys after an access rereg")
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, server_mr.buf), e.IBV_WC_SUCCESS, "write after access rereg")
check(server_mr.read(64, 0), b"A" * 64, "written data")
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, e.IBV_ACCESS_REMOTE_WRITE),
        "Failed to rereg MR: IBV_REREG_MR_ERR_CMD", errno.EINVAL, "REMOTE_WRITE without LOCAL_WRITE")
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd, 0, 0, RW),
        "Failed to rereg MR: IBV_REREG_MR_ERR_INPUT", errno.EINVAL, "access without CHANGE_ACCESS")
refused(lambda: server_mr.rereg(1 << 4, None, 0, 0, 0),
        "Failed to rereg MR: IBV_REREG_MR_ERR_INPUT", errno.EINVAL, "a flag libibverbs does not know")
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_KEEP_VALID, None, 0, 0, 0),
        "Failed to rereg MR: IBV_REREG_MR_ERR_CMD", errno.EOPNOTSUPP, "a flag the device does not take")
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, None, 0, 0, 0),
        "Failed to rereg MR: IBV_REREG_MR_ERR_INPUT", errno.EINVAL, "translation without an address")
# a bound window holds the MR
(_, server), (_, scq) = pair()
mw = MW(pd, e.IBV_MW_TYPE_1)
server.bind_mw(mw, MWBind(MWBindInfo(server_mr, server_mr.buf, 64, e.IBV_ACCESS_REMOTE_WRITE), e.IBV_SEND_SIGNALED))
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "bind")
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_CHANGE_ACCESS, None, 0, 0, RW),
        "IBV_REREG_MR_ERR_CMD", errno.EBUSY, "rereg with a window bound")
server.bind_mw(mw, MWBind(MWBindInfo(server_mr, server_mr.buf, 0, 0), e.IBV_SEND_SIGNALED))
check(rc_loopback.status(scq), e.IBV_WC_SUCCESS, "unbind")
mw.close()

# -- rereg: PD
pd2 = PD(ctx)
server_mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd2, 0, 0, 0)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, server_mr.buf), e.IBV_WC_REM_ACCESS_ERR, "write to another PD's MR")
server_mr.rereg(e.IBV_REREG_MR_CHANGE_PD, pd, 0, 0, 0)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, server_mr.buf), e.IBV_WC_SUCCESS, "write after the PD came back")
pd2.close()                                   # the MR is no longer pd2's: it stays
check(server_mr.read(4, 0), b"AAAA", "MR after the other PD closed")

# -- rereg: translation, onto the caller's own memory (pinned: every page mapped now)
mem = ctypes.create_string_buffer(b"N" * 3 * SIZE)
addr = ctypes.addressof(mem) + 1000
old_buf, keys = server_mr.buf, (server_mr.lkey, server_mr.rkey)
server_mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, None, addr, 2 * SIZE, 0)
check((server_mr.buf, server_mr.length), (addr, 2 * SIZE), "MR after translation")
check((server_mr.lkey, server_mr.rkey), keys, "keys after a translation")
check(mem.raw[:3 * SIZE] == b"N" * 3 * SIZE, True, "the caller's memory after translation")
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, old_buf), e.IBV_WC_REM_ACCESS_ERR, "write to the old address")
client_mr.write(b"T" * 64, 64)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, addr + SIZE), e.IBV_WC_SUCCESS, "write to the new address")
check(ctypes.string_at(addr + SIZE - 1, 66), b"N" + b"T" * 64 + b"N", "the write in the caller's memory")
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, addr + 2 * SIZE - 32), e.IBV_WC_REM_ACCESS_ERR,
      "write past the new length")
mem[1000:1004] = b"LOCL"                       # the caller's stores are the MR's
check(server_mr.read(4, 0), b"LOCL", "MR read after a store")
# translation with PD and access at once: the new access is the new pages' (read-only memory
# cannot be a writable MR: EFAULT, and the MR stays as it was)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
ro = libc.mmap(None, SIZE, 1, 0x22, -1, 0)                 # PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS
refused(lambda: server_mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION | e.IBV_REREG_MR_CHANGE_ACCESS, None, ro, SIZE,
                                RW), "Failed to rereg MR: IBV_REREG_MR_ERR_CMD", errno.EFAULT, "read-only pages")
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, addr + SIZE), e.IBV_WC_SUCCESS, "the MR after a refused translation")
pd2 = PD(ctx)
mem2 = ctypes.create_string_buffer(SIZE)
server_mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION | e.IBV_REREG_MR_CHANGE_PD | e.IBV_REREG_MR_CHANGE_ACCESS, pd2,
                ctypes.addressof(mem2), SIZE, e.IBV_ACCESS_LOCAL_WRITE)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, ctypes.addressof(mem2)), e.IBV_WC_REM_ACCESS_ERR,
      "write to an MR of another PD, without REMOTE_WRITE")
server_mr.rereg(e.IBV_REREG_MR_CHANGE_PD | e.IBV_REREG_MR_CHANGE_ACCESS, pd, 0, 0, RW)
check(rdma(e.IBV_WR_RDMA_WRITE, server_mr.rkey, ctypes.addressof(mem2) + 8), e.IBV_WC_SUCCESS, "write after both")
check(mem2.raw[:80], bytes(8) + b"T" * 64 + bytes(8), "the write in the second memory")
pd2.close()
# an MR made on memory the library allocated (pyverbs' own buffer), then moved: that buffer is freed
odp_mr = MR(pd, SIZE, RW | e.IBV_ACCESS_ON_DEMAND)
odp_mr.rereg(e.IBV_REREG_MR_CHANGE_TRANSLATION, None, addr, SIZE, 0)
check(rdma(e.IBV_WR_RDMA_WRITE, odp_mr.rkey, addr + 100), e.IBV_WC_SUCCESS, "write to the moved ODP MR")
check(ctypes.string_at(addr + 100, 64), b"T" * 64, "the write to the moved ODP MR")
odp_mr.close()
server_mr.close()

# -- device memory
attr_ex = ctx.query_device_ex()
check(attr_ex.max_dm_size, 256 * 1024, "max_dm_size")
dm = DM(ctx, AllocDmAttr(length=SIZE))
dm.copy_to_dm(8, b"devmem!!", 8)
check(dm.copy_from_dm(8, 8), b"devmem!!", "copy_from_dm")
refused(lambda: dm.copy_to_dm(3, b"xxxx", 4), "Failed to copy to dm", errno.EINVAL, "unaligned copy")
refused(lambda: dm.copy_from_dm(SIZE, 4), "Failed to copy from dm", errno.EFAULT, "copy past the DM")
refused(lambda: DM(ctx, AllocDmAttr(length=256 * 1024)), "Failed to allocate device memory of size", errno.ENOMEM,
        "DM past the pool")
refused(lambda: DMMR(pd, SIZE + 4, e.IBV_ACCESS_ZERO_BASED | e.IBV_ACCESS_LOCAL_WRITE, dm, 0),
        "Failed to register a device MR", errno.EINVAL, "DMMR past the DM")
dmmr = DMMR(pd, SIZE - 1024, e.IBV_ACCESS_ZERO_BASED | RW | e.IBV_ACCESS_REMOTE_READ, dm, 1024)
client_mr.write(b"W" * 64, 64)
check(rdma(e.IBV_WR_RDMA_WRITE, dmmr.rkey, 128), e.IBV_WC_SUCCESS, "write into device memory")
check(dm.copy_from_dm(1024 + 128, 64), b"W" * 64, "the write in the DM")
dm.copy_to_dm(1024 + 256, b"R" * 64, 64)
check(rdma(e.IBV_WR_RDMA_READ, dmmr.rkey, 256), e.IBV_WC_SUCCESS, "read from device memory")
check(client_mr.read(64, 0), b"R" * 64, "the read's data")
target = MR(pd, SIZE, RW)
check(rdma(e.IBV_WR_RDMA_WRITE, target.rkey, target.buf, SGE(128, 64, dmmr.lkey)), e.IBV_WC_SUCCESS,
      "write from device memory")
check(target.read(64, 0), b"W" * 64, "DM as a local SGE")
check(rdma(e.IBV_WR_RDMA_WRITE, dmmr.rkey, SIZE - 1024 - 32), e.IBV_WC_REM_ACCESS_ERR, "write past the DMMR")
dm.close()                                     # closes its DMMR first
check(dmmr.closed, True, "DMMR closed with its DM")
big = DM(ctx, AllocDmAttr(length=256 * 1024))  # the pool is whole again
other = Context(name=ctx.name)
refused(lambda: DM(other, AllocDmAttr(length=4)), "Failed to allocate device memory", errno.ENOMEM,
        "the pool is the device's, over its contexts")
ctx.close()                                    # frees its DM with it
DM(other, AllocDmAttr(length=256 * 1024)).close()
other.close()
print("OK mr rereg dm")
