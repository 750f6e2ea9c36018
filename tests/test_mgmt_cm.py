"""The IB CM's layout under mgmt/cm: its counter table, its timer
arithmetic, the QP attribute names it hands the library, and its layering
(the protocol itself is tested in test_transport_cm.py)."""

import random

import import_graph
import pytest

from softrdma.enums import ibv_qp_attr_mask as M
from softrdma.mgmt.cm.agent import CmAgent
from softrdma.mgmt.cm.counters import COUNTER_INDEX, COUNTER_NAMES, CmCounters
from softrdma.mgmt.cm.ids import CmState
from softrdma.mgmt.cm.request import AcceptParams, ConnectParams
from softrdma.mgmt.cm.timers import cm_ack_timeout
from softrdma.uapi.qp_attr import mask_of as qp_attr_mask
from softrdma.wire.cm import CmAttr

GID_A = bytes.fromhex("fe800000000000000000000000000001")
GID_B = bytes.fromhex("fe800000000000000000000000000002")


def test_counter_index_is_the_attribute_id_less_0x10():
    """enum cm_counter_index: CM_REQ_COUNTER ... CM_APR_COUNTER follow the attribute IDs."""
    assert len(COUNTER_NAMES) == len(COUNTER_INDEX) == 11
    for name, i in COUNTER_INDEX.items():
        assert CmAttr[name] - 0x10 == i and COUNTER_NAMES[i] == name.lower()


def test_counter_groups_start_at_zero():
    c = CmCounters()
    for g in (c.cm_tx_msgs, c.cm_tx_retries, c.cm_rx_msgs, c.cm_rx_duplicates):
        assert g == [0] * 11
    assert c.rx_drops == 0


@pytest.mark.parametrize("ca_ack_delay, life, want", [
    (15, 18, 19),     # life + 1, the CA's delay below it
    (15, 14, 16),     # life + 1 == delay: one more
    (15, 10, 15),     # the CA's delay dominates
    (15, 13, 16),     # life + 1 == delay - 1: one more
    (15, 31, 31),     # capped at 31
])
def test_cm_ack_timeout(ca_ack_delay, life, want):
    assert cm_ack_timeout(ca_ack_delay, life) == want


def _established():
    a = CmAgent(0xA, GID_A, rng=random.Random(1), hi_tid=1)
    b = CmAgent(0xB, GID_B, rng=random.Random(2), hi_tid=2)

    def run():
        while a.mads or b.mads:
            for src, dst in ((a, b), (b, a)):
                mads, src.mads = src.mads, []
                for m in mads:
                    dst.receive(m.data, src.gid, 0.0)
    b.listen(0x1234)
    a_id = a.connect(ConnectParams(service_id=0x1234, dest_gid=GID_B, qp_num=0x11), now=0.0)
    run()
    b_id = b.events.pop().cm_id
    b.accept(b_id, AcceptParams(qp_num=0x22), now=0.0)
    run()
    a.send_rtu(a_id)
    run()
    assert a_id.state == b_id.state == CmState.ESTABLISHED
    return a, a_id


def test_qp_attrs_names_give_the_masks_an_rc_qp_needs():
    """The names of ib_cm_init_qp_attr's dict make, through the library's
    qp_attr_mask, the masks ibv_modify_qp requires of an RC QP."""
    agent, cm_id = _established()
    assert qp_attr_mask(agent.qp_attrs(cm_id, "INIT")) == \
        M.IBV_QP_STATE | M.IBV_QP_PORT | M.IBV_QP_PKEY_INDEX | M.IBV_QP_ACCESS_FLAGS
    assert qp_attr_mask(agent.qp_attrs(cm_id, "RTR")) == \
        M.IBV_QP_STATE | M.IBV_QP_AV | M.IBV_QP_PATH_MTU | M.IBV_QP_DEST_QPN | M.IBV_QP_RQ_PSN \
        | M.IBV_QP_MAX_DEST_RD_ATOMIC | M.IBV_QP_MIN_RNR_TIMER
    assert qp_attr_mask(agent.qp_attrs(cm_id, "RTS")) == \
        M.IBV_QP_STATE | M.IBV_QP_SQ_PSN | M.IBV_QP_TIMEOUT | M.IBV_QP_RETRY_CNT | M.IBV_QP_RNR_RETRY \
        | M.IBV_QP_MAX_QP_RD_ATOMIC


def test_cm_modules_are_small_documented_and_import_only_wire():
    edges = import_graph.graph()
    mods = {m: p for m, p in import_graph.modules().items() if m.startswith("softrdma.mgmt.cm")}
    assert "softrdma.mgmt.cm.agent" in mods
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        assert text.count("\n") <= 400, mod
        assert text.lstrip().startswith('"""'), mod
        for dep in edges[mod]:
            assert import_graph.part(dep) in {"mgmt", "wire", "enums", "errors", "uapi"}, (mod, dep)


def test_library_rdma_cm_imports_no_daemon_module():
    edges = import_graph.graph()
    for mod in ("softrdma.verbs.cm", "softrdma.pyverbs.cmid"):
        assert {import_graph.part(d) for d in edges[mod]} <= {"verbs", "pyverbs", "wire", "uapi", "enums",
                                                               "errors"}, mod
