"""pyverbs 44's cmid/qp API details the rdma_cm suite relies on, on a real
softrdmad: rdma_getaddrinfo without a destination, rdma_join_multicast_ex's
checks, ECE as rxe has it (the provider's set/query fail EOPNOTSUPP; vendor
0 is skipped by pyverbs), librdmacm's ECE checks on the CM ID."""

from __future__ import annotations

import errno

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.enums import IBV_QPT_RC
from softrdma.pyverbs import librdmacm_enums as ce
from softrdma.pyverbs.cmid import CMID, AddrInfo, CMEventChannel, JoinMCAttrEx
from softrdma.pyverbs.qp import ECE
from softrdma.verbs import cq, device, pd, qp
from softrdma.verbs.errors import PyverbsRDMAError, PyverbsUserError


@pytest.fixture
def run(monkeypatch):
    with daemon_in_shm("cmidapi") as d:
        monkeypatch.setenv("SOFTRDMA_RUN", d.run_dir)
        monkeypatch.setenv("SOFTRDMA_AUTOSTART", "0")
        yield d


def test_addrinfo_of_a_group_alone_has_a_source_and_no_destination():
    ai = AddrInfo(src="230.0.0.1")
    assert ai.src_addr == ("230.0.0.1", 0) and ai.dst_addr == (None, 0)
    both = AddrInfo(src="127.0.0.1", dst="230.0.0.1")
    assert both.src_addr[0] == "127.0.0.1" and both.dst_addr == ("230.0.0.1", 0)
    with pytest.raises(PyverbsRDMAError) as ei:
        AddrInfo(dst="127.0.0.1", dst_service="no-such-service-name")
    assert ei.value.error_code == errno.EINVAL


def test_join_multicast_ex_checks_as_librdmacm(run):
    ch = CMEventChannel()
    cid = CMID(creator=ch, port_space=ce.RDMA_PS_UDP)
    try:
        with pytest.raises(PyverbsUserError):
            cid.join_multicast()
        group = AddrInfo(src="230.0.0.1")
        for mask, flags in ((ce.RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS, 0),
                            (ce.RDMA_CM_JOIN_MC_ATTR_ADDRESS, 0),
                            (ce.RDMA_CM_JOIN_MC_ATTR_ADDRESS | ce.RDMA_CM_JOIN_MC_ATTR_JOIN_FLAGS, 7)):
            with pytest.raises(PyverbsRDMAError) as ei:
                cid.join_multicast(mc_attr=JoinMCAttrEx(group, comp_mask=mask, join_flags=flags))
            assert ei.value.error_code == errno.EINVAL
    finally:
        cid.close()
        ch.close()


def test_qp_ece_is_not_supported_as_on_rxe(run):
    ctx = device.Context(name="rxe0")
    try:
        c = cq.CQ(ctx, 4)
        q = qp.QP(pd.PD(ctx), qp.QPInitAttr(IBV_QPT_RC, scq=c, rcq=c, cap=qp.QPCap()))
        with pytest.raises(PyverbsRDMAError) as ei:
            q.query_ece()
        assert ei.value.error_code == errno.EOPNOTSUPP and "Failed to query ECE" in str(ei.value)
        q.set_ece(ECE())                       # vendor_id 0: pyverbs does not call ibv_set_ece
        with pytest.raises(PyverbsRDMAError) as ei:
            q.set_ece(ECE(vendor_id=0x15b3, options=1))
        assert ei.value.error_code == errno.EOPNOTSUPP and "Failed to set ECE" in str(ei.value)
    finally:
        ctx.close()


def test_cmid_ece_checks_as_librdmacm(run):
    ch = CMEventChannel()
    cid = CMID(creator=ch)
    try:
        for bad in (ECE(), ECE(vendor_id=1, comp_mask=1)):
            with pytest.raises(PyverbsRDMAError) as ei:
                cid.set_local_ece(bad)
            assert ei.value.error_code == errno.EINVAL
        cid.set_local_ece(ECE(vendor_id=0x15b3, options=3))
        r = cid.get_remote_ece()
        assert (r.vendor_id, r.options, r.comp_mask) == (0, 0, 0)
    finally:
        cid.close()
        ch.close()
