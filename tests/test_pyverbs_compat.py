"""pyverbs API details rdma-core's own test suite relies on, end to end
through a softrdmad: ``CQ.comp_channel``, a float ``cqe`` (Cython's int
conversion: the suite asks for ``max_cqe/2``), ``CQ(max_cqe + 1)`` refused
with EINVAL (rxe_cq_chk_attr), ``Device.node_type``/``transport_type`` on
get_device_list's entries, ``Context.cmd_fd`` (the control connection's
fd; importing it is EOPNOTSUPP), pyverbs' "Failed to create AH" text,
``pyverbs.fork`` with a copy-on-fork system's answers, and ``pyverbs.utils``."""

from __future__ import annotations

import errno
import os
import socket
import stat

import pytest

from daemon_helpers import context_on, daemon_in_shm
from softrdma.pyverbs import enums as e
from softrdma.pyverbs import utils as pu
from softrdma.pyverbs.addr import AH, AHAttr
from softrdma.pyverbs.cq import CQ, CompChannel
from softrdma.pyverbs.device import Context, get_device_list
from softrdma.pyverbs.fork import fork_init, is_fork_initialized
from softrdma.pyverbs.mr import MR
from softrdma.pyverbs.pd import PD
from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError


@pytest.fixture(scope="module")
def run_dir():
    with daemon_in_shm("pvcompat") as d:
        yield d.run_dir


@pytest.fixture
def ctx(run_dir, monkeypatch):
    with context_on(run_dir, monkeypatch) as c:
        yield c


def test_cq_comp_channel_is_the_channel_it_was_created_with(ctx):
    with CompChannel(ctx) as cc:
        cq = CQ(ctx, 8, None, cc, 0)
        assert cq.comp_channel is cc
        cq.close()
    plain = CQ(ctx, 8, None, None, 0)
    assert plain.comp_channel is None
    plain.close()


def test_cq_sizes_as_the_suite_asks_them(ctx):
    max_cqe = ctx.query_device().max_cqe
    for size in (1, max_cqe / 2, max_cqe):         # test_cq.test_create_cq: a float in the middle
        cq = CQ(ctx, size, None, None, 0)
        assert cq.cqe >= int(size)
        cq.close()
    with pytest.raises(PyverbsRDMAError) as ex:     # test_create_cq_bad_flow
        CQ(ctx, max_cqe + 1, None, None, 0)
    assert ex.value.error_code == errno.EINVAL
    with pytest.raises(PyverbsRDMAError) as ex:
        CQ(ctx, 100, None, None, ctx.num_comp_vectors + 1)
    assert ex.value.error_code == errno.EINVAL


def test_device_list_entries_have_node_and_transport_type(run_dir, monkeypatch):
    monkeypatch.setenv("SOFTRDMA_RUN", run_dir)
    monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
    devs = get_device_list()
    assert [d.name for d in devs] == [b"rxe0"]
    assert devs[0].node_type == e.IBV_NODE_CA == 1            # rxe: RDMA_NODE_IB_CA, sysfs "1: CA"
    assert devs[0].transport_type == e.IBV_TRANSPORT_IB == 0
    assert devs[0].index == 0
    node_type = open(os.path.join(run_dir, "sys", "class", "infiniband", "rxe0", "node_type")).read()
    assert node_type.split(":")[0] == str(devs[0].node_type)  # one fact, two views


def test_cmd_fd_is_the_control_connection(ctx):
    fd = ctx.cmd_fd
    assert stat.S_ISSOCK(os.fstat(fd).st_mode)
    s = socket.socket(fileno=os.dup(fd))
    try:
        assert s.family == socket.AF_UNIX and s.getpeername().endswith("softrdmad.sock")
    finally:
        s.close()
    dup = os.dup(fd)
    imported = Context(cmd_fd=dup)                       # ibv_import_device (test_import.py)
    assert imported.cmd_fd == dup
    imported.close()
    with pytest.raises(OSError):
        os.fstat(dup)                                    # the imported context owned its fd
    ctx.close()
    with pytest.raises(OSError):
        os.fstat(fd)                                     # closing the context closed the fd


def test_ah_error_text_is_pyverbs(ctx):
    with PD(ctx) as pd:
        with pytest.raises(PyverbsRDMAError) as ex:      # RoCE without a GRH: test_addr.test_create_ah_roce
            AH(pd, attr=AHAttr(is_global=0, port_num=1))
    assert "Failed to create AH" in str(ex.value)
    assert ex.value.error_code == errno.EINVAL


def test_fork_is_unneeded_before_and_after_registration(ctx):
    assert is_fork_initialized() == e.IBV_FORK_UNNEEDED
    fork_init()
    with PD(ctx) as pd, MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE):
        fork_init()                                      # no "too late" EINVAL: copy-on-fork
        assert is_fork_initialized() == e.IBV_FORK_UNNEEDED
    assert [m.name for m in e.ibv_fork_status] == ["IBV_FORK_DISABLED", "IBV_FORK_ENABLED", "IBV_FORK_UNNEEDED"]


def test_fork_keeps_the_parents_mr_and_the_childs_view_shared(ctx):
    """Why UNNEEDED is true: an MR is a shared mapping, so after fork the
    child's writes land in the very pages the parent registered (no
    copy-on-write copy the device would not see)."""
    with PD(ctx) as pd, MR(pd, 4096, e.IBV_ACCESS_LOCAL_WRITE) as mr:
        mr.write(b"parent", 6)
        pid = os.fork()
        if pid == 0:
            try:
                mr.write(b"child!", 6)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        assert mr.read(6, 0) == b"child!"


def test_utils_as_rdma_core_has_them():
    assert pu.qp_type_to_str(e.IBV_QPT_RC) == "RC" and pu.qp_type_to_str(e.IBV_QPT_UD) == "UD"
    assert pu.qp_type_to_str(8) == "Raw Packet" and pu.qp_type_to_str(77) == "Unknown (77)"
    assert [pu.qp_state_to_str(s) for s in range(8)] == ["Reset", "Init", "RTR", "RTS", "SQD", "SQE", "Error",
                                                         "Unknown"]
    assert pu.mtu_to_str(e.IBV_MTU_1024) == 1024 and pu.mtu_to_str(9) == 0
    assert pu.access_flags_to_str(e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_READ) == "Local write Remote read "
    assert pu.mig_state_to_str(2) == "Armed" and pu.mig_state_to_str(5) == "Unknown (5)"
    assert pu.rereg_error_to_str(e.IBV_REREG_MR_ERR_CMD) == "IBV_REREG_MR_ERR_CMD"
    assert pu.rereg_error_to_str(3) == "Unknown error (3)"
    # ibv_gid's halves are big-endian in memory: as ints on a little-endian host they read swapped
    assert pu.gid_str(pu.be64toh(0xfe80 << 48), pu.be64toh(0x0200_5eff_fe00_0001)) == \
        "fe80:0000:0000:0000:0200:5eff:fe00:0001"
    assert pu.gid_str_to_array("fe80:0000:0000:0000:0200:5eff:fe00:0001")[:3] == ["fe", "80", "00"]
    with pytest.raises(PyverbsUserError):
        pu.gid_str_to_array("fe80::1")


def test_pyverbs_rdma_errno_carries_the_last_failed_calls_errno(ctx):
    from softrdma.pyverbs.base import PyverbsRDMAErrno
    with pytest.raises(PyverbsRDMAError):
        CQ(ctx, 0, None, None, 0)                      # EINVAL
    err = PyverbsRDMAErrno("Failed to create a CQ with cq_size=0")
    assert isinstance(err, PyverbsRDMAError) and err.error_code == errno.EINVAL
    assert str(err) == "Failed to create a CQ with cq_size=0. Errno: 22, Invalid argument"
    with pytest.raises(PyverbsRDMAError):
        Context(cmd_fd=1 << 20)                        # no such fd: EBADF
    assert PyverbsRDMAErrno("x").error_code == errno.EBADF


def test_cm_enums_is_librdmacm_enums():
    from softrdma.pyverbs import cm_enums as ce, librdmacm_enums as le
    for name in ("RDMA_PS_TCP", "RDMA_PS_UDP", "RAI_PASSIVE", "RDMA_CM_EVENT_ESTABLISHED",
                 "RDMA_MC_JOIN_FLAG_FULLMEMBER", "RDMA_OPTION_ID_ACK_TIMEOUT"):
        assert getattr(ce, name) == getattr(le, name)
    assert ce.RDMA_PS_TCP == 0x0106 and ce.RDMA_PS_UDP == 0x0111       # rdma_cma.h


def test_query_pkey_is_rxes_one_entry_table(ctx):
    assert ctx.query_port(1).pkey_tbl_len == 1
    assert ctx.query_pkey(port_num=1, index=0) == 0xFFFF
    for port, index in ((1, 1), (1, -1), (2, 0)):
        with pytest.raises(PyverbsRDMAError) as ex:
            ctx.query_pkey(port, index)
        assert ex.value.error_code == errno.EINVAL
        assert str(ex.value).startswith(f"Failed to query pkey {index} of port {port}")


def test_port_attributes_translate_as_pyverbs_prints_them(ctx):
    from softrdma.pyverbs import device as d
    a = ctx.query_port(1)
    for text in (d.phys_state_to_str(a.phys_state), d.translate_mtu(a.max_mtu), d.translate_mtu(a.active_mtu),
                 d.width_to_str(a.active_width), d.speed_to_str(a.active_speed), d.port_state_to_str(a.state),
                 d.translate_link_layer(a.link_layer)):
        assert "Invalid" not in text
    assert d.phys_state_to_str(5) == "Link up (5)" and d.phys_state_to_str(9) == "Invalid physical state"
    assert d.width_to_str(1) == "1X (1)" and d.width_to_str(3) == "Invalid width"
    assert d.speed_to_str(1) == "2.5 Gbps (1)" and d.speed_to_str(3) == "Invalid speed"
    assert d.translate_mtu(3) == "1024 (3)" and d.translate_mtu(0) == "Invalid MTU (0)"
    assert d.port_state_to_str(4) == "Active (4)" and d.translate_link_layer(2) == "Ethernet"
    assert d.translate_node_type(get_device_list()[0].node_type) == "CA"
    assert d.translate_transport_type(0) == "IB" and d.translate_gid_type(2) == "RoCEv2"
    assert d.guid_format(0x0200_5eff_fe00_0001) == "0100:00fe:ff5e:0002"     # stored big-endian
    assert d.guid_to_hex(0xabc) == "abc"
