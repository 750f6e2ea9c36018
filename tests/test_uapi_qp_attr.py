"""uapi.qp_attr: the one ibv_qp_attr / ibv_qp_cap model, and the two sides built on it."""

import pytest

from softrdma.enums import IBV_QPS_INIT, IBV_QPS_RESET, ibv_qp_attr_mask as M
from softrdma.transport.qp import QPAttr as TransportQPAttr, QPCap as TransportQPCap
from softrdma.transport.wr import AddressVector
from softrdma.uapi import qp_attr as m
from softrdma.verbs.addr import AHAttr
from softrdma.verbs.qp import QPAttr as VerbsQPAttr, QPCap as VerbsQPCap


def test_every_mask_bit_names_fields_of_the_struct():
    assert [bit for bit, _ in m.ATTR_MASK_FIELDS] == [int(b) for b in M]
    structs = {"ah_attr", "alt_ah_attr", "cap"}
    for _, fields in m.ATTR_MASK_FIELDS:
        for f in fields:
            assert f in m.QP_ATTR or f in structs
    covered = {f for _, fs in m.ATTR_MASK_FIELDS for f in fs}
    assert set(m.QP_ATTR) - covered == {"sq_draining"}      # reported by query, never modified


def test_widths_are_the_c_fields():
    assert m.QP_ATTR["pkey_index"] == 0xFFFF and m.QP_ATTR["timeout"] == 0xFF and m.QP_ATTR["qkey"] == 0xFFFFFFFF
    assert set(m.QP_CAP) == {"max_send_wr", "max_recv_wr", "max_send_sge", "max_recv_sge", "max_inline_data"}


def test_base_struct():
    a = m.QPAttr(sq_psn=5)
    assert (a.qp_state, a.cur_qp_state, a.path_mtu, a.port_num, a.sq_psn, a.ah_attr) == (IBV_QPS_RESET, 0, 3, 1, 5,
                                                                                          None)
    with pytest.raises(TypeError):
        m.QPAttr(no_such_field=1)


def test_to_wire_leaves_unsupported_bits_out():
    a = m.QPAttr(qp_state=IBV_QPS_INIT, qkey=7, rate_limit=9, path_mig_state=1)
    mask = M.IBV_QP_STATE | M.IBV_QP_QKEY | M.IBV_QP_RATE_LIMIT | M.IBV_QP_PATH_MIG_STATE | M.IBV_QP_CAP
    assert a.to_wire(int(mask)) == {"qp_state": IBV_QPS_INIT, "qkey": 7, "cap": {
        "max_send_wr": 0, "max_recv_wr": 0, "max_send_sge": 0, "max_recv_sge": 0, "max_inline_data": 0}}


def test_the_two_sides():
    v = VerbsQPAttr()
    assert v.qp_state == IBV_QPS_INIT and isinstance(v.ah_attr, AHAttr) and isinstance(v.cap, VerbsQPCap)
    assert vars(VerbsQPCap()) == dict(max_send_wr=1, max_recv_wr=10, max_send_sge=1, max_recv_sge=1,
                                      max_inline_data=0)
    t = TransportQPAttr(qp_state=2)
    assert t.qp_state == 2 and isinstance(t.ah_attr, AddressVector)
    assert vars(TransportQPCap()) == dict(max_send_wr=256, max_recv_wr=256, max_send_sge=4, max_recv_sge=4,
                                          max_inline_data=0)
