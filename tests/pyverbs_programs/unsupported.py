"""pyverbs objects softrdma's device does not have (yet) fail as on rxe:
PyverbsRDMAError with errno EOPNOTSUPP and pyverbs' message; an mlx5
context is refused as on any non-mlx5 device; an EFA context opens but
cannot be queried; a basic SRQ through SrqInitAttrEx is created for real.
Run through ``softrdma run`` (plain ``pyverbs`` imports)."""

import errno

import pyverbs.device as d
import pyverbs.enums as e
from pyverbs.cq import CQ
from pyverbs.pd import PD
from pyverbs.providers.efa.efadv import EfaContext
from pyverbs.providers.mlx5.mlx5dv import Mlx5Context, Mlx5DVContextAttr, Mlx5QP
from pyverbs.pyverbs_error import PyverbsRDMAError, PyverbsUserError
from pyverbs.qp import QP, QPCap, QPInitAttr
from pyverbs.srq import SRQ, SrqInitAttrEx


def expect_eopnotsupp(what, msg, make):
    try:
        make()
    except PyverbsRDMAError as ex:
        assert ex.error_code == errno.EOPNOTSUPP, (what, ex.error_code, ex)
        assert str(ex).startswith(msg), (what, str(ex))
        print("EOPNOTSUPP", what)
        return
    raise AssertionError(f"{what}: created, expected EOPNOTSUPP")


name = d.get_device_list()[0].name.decode()
with d.Context(name=name) as ctx:
    pd = PD(ctx)
    cq = CQ(ctx, 16)
    qp = QP(pd, QPInitAttr(qp_type=e.IBV_QPT_RC, scq=cq, rcq=cq, cap=QPCap(max_send_wr=4, max_recv_wr=4)))
    basic = SrqInitAttrEx(max_wr=8)
    basic.comp_mask, basic.pd = e.IBV_SRQ_INIT_ATTR_TYPE | e.IBV_SRQ_INIT_ATTR_PD, pd
    srq = SRQ(ctx, basic)
    assert srq.query().max_wr >= 8 if hasattr(srq, "query") else True
    srq.close()
    expect_eopnotsupp("Mlx5QP", "Mlx5QP:", lambda: Mlx5QP(ctx, None))
    try:
        Mlx5Context(Mlx5DVContextAttr(), name=name)
        raise AssertionError("Mlx5Context opened on softrdma's device")
    except PyverbsUserError as ex:
        assert str(ex) == "This is not an MLX5 device", str(ex)
    with EfaContext(name=name) as efa_ctx:
        expect_eopnotsupp("query_efa_device", f"Failed to query efa device {name}", efa_ctx.query_efa_device)
    qp.close()
print("OK unsupported")
