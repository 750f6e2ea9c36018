"""uapi.wr: the one work-request opcode table, and the sets every layer derives from it."""

from softrdma.enums import ibv_qp_create_send_ops_flags as X
from softrdma.enums import ibv_qp_type, ibv_wc_opcode as WC, ibv_wr_opcode as WR
from softrdma.uapi import wr as t

RC, UC, UD = ibv_qp_type.IBV_QPT_RC, ibv_qp_type.IBV_QPT_UC, ibv_qp_type.IBV_QPT_UD


def test_every_opcode_has_an_entry():
    assert set(t.WR_OPCODE_INFO) == set(WR)
    for op, info in t.WR_OPCODE_INFO.items():
        assert info.name == "IB_" + op.name[len("IBV_"):]


def test_valid_qp_types():
    assert t.valid_opcodes(UD) == {WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM}
    assert t.valid_opcodes(UC) == {WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM, WR.IBV_WR_RDMA_WRITE,
                                   WR.IBV_WR_RDMA_WRITE_WITH_IMM, WR.IBV_WR_LOCAL_INV, WR.IBV_WR_BIND_MW}
    assert t.valid_opcodes(RC) == set(WR) - {WR.IBV_WR_TSO, WR.IBV_WR_DRIVER1}
    assert WR.IBV_WR_FLUSH in t.valid_opcodes(RC) and WR.IBV_WR_ATOMIC_WRITE in t.valid_opcodes(RC)


def test_masks():
    assert t.wr_opcodes(t.WR_INLINE_MASK) == {WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM, WR.IBV_WR_SEND_WITH_INV,
                                              WR.IBV_WR_RDMA_WRITE, WR.IBV_WR_RDMA_WRITE_WITH_IMM}
    assert t.wr_opcodes(t.WR_ATOMIC_MASK) == {WR.IBV_WR_ATOMIC_CMP_AND_SWP, WR.IBV_WR_ATOMIC_FETCH_AND_ADD}
    assert t.wr_opcodes(t.WR_ATOMIC_OR_READ_MASK) == t.wr_opcodes(t.WR_ATOMIC_MASK) | {WR.IBV_WR_RDMA_READ}
    assert t.wr_opcodes(t.WR_LOCAL_OP_MASK) == {WR.IBV_WR_LOCAL_INV, WR.IBV_WR_BIND_MW}
    assert t.wr_opcodes(t.WR_IMM_MASK) == {WR.IBV_WR_SEND_WITH_IMM, WR.IBV_WR_RDMA_WRITE_WITH_IMM}
    assert t.wr_opcodes(t.WR_FLUSH_MASK) == {WR.IBV_WR_FLUSH}
    assert t.wr_opcodes(t.WR_ATOMIC_WRITE_MASK) == {WR.IBV_WR_ATOMIC_WRITE}
    assert t.wr_opcodes(t.WR_INV_MASK) == {WR.IBV_WR_SEND_WITH_INV, WR.IBV_WR_LOCAL_INV}
    assert t.wr_opcodes(t.WR_SOLICITED_MASK) == {WR.IBV_WR_SEND, WR.IBV_WR_SEND_WITH_IMM, WR.IBV_WR_SEND_WITH_INV,
                                                 WR.IBV_WR_RDMA_WRITE_WITH_IMM}


def test_wc_opcodes():
    wc = t.wc_opcodes()
    assert wc[WR.IBV_WR_SEND_WITH_INV] == WC.IBV_WC_SEND
    assert wc[WR.IBV_WR_RDMA_WRITE_WITH_IMM] == WC.IBV_WC_RDMA_WRITE
    assert wc[WR.IBV_WR_RDMA_READ] == WC.IBV_WC_RDMA_READ
    assert wc[WR.IBV_WR_ATOMIC_CMP_AND_SWP] == WC.IBV_WC_COMP_SWAP
    assert wc[WR.IBV_WR_ATOMIC_FETCH_AND_ADD] == WC.IBV_WC_FETCH_ADD
    assert wc[WR.IBV_WR_LOCAL_INV] == WC.IBV_WC_LOCAL_INV
    assert wc[WR.IBV_WR_BIND_MW] == WC.IBV_WC_BIND_MW
    assert wc[WR.IBV_WR_FLUSH] == WC.IBV_WC_FLUSH
    assert wc[WR.IBV_WR_ATOMIC_WRITE] == WC.IBV_WC_ATOMIC_WRITE


def test_send_ops_flags_as_rxe_provider():
    ud = X.IBV_QP_EX_WITH_SEND | X.IBV_QP_EX_WITH_SEND_WITH_IMM
    uc = ud | X.IBV_QP_EX_WITH_RDMA_WRITE | X.IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | X.IBV_QP_EX_WITH_BIND_MW
    rc = uc | X.IBV_QP_EX_WITH_RDMA_READ | X.IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | \
        X.IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | X.IBV_QP_EX_WITH_SEND_WITH_INV | X.IBV_QP_EX_WITH_LOCAL_INV | \
        X.IBV_QP_EX_WITH_FLUSH | X.IBV_QP_EX_WITH_ATOMIC_WRITE      # RXE_SUP_RC_QP_SEND_OPS_FLAGS
    assert (t.send_ops_flags(UD), t.send_ops_flags(UC), t.send_ops_flags(RC)) == (ud, uc, rc)
