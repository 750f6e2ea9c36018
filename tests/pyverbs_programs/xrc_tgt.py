"""The second process of tests/test_pyverbs_xrc.py: opens the XRC domain of
the file named in argv[1] *without* O_CREAT (so only the domain the test
process created through the same file can be found), creates an XRC TGT QP
on it and connects it to the INI QP the test tells it of.  Protocol, one
JSON object a line: it prints {"tgt": qpn}, reads {"ini": qpn, "gid": ...},
prints {"ready": true}, then waits for any line and exits."""

import json
import os
import sys

from softrdma.pyverbs import enums as e
from softrdma.pyverbs.addr import AHAttr, GlobalRoute
from softrdma.pyverbs.device import Context
from softrdma.pyverbs.qp import QP, QPAttr, QPInitAttrEx
from softrdma.pyverbs.xrcd import XRCD, XRCDInitAttr

GID_INDEX = 1

ctx = Context(name="rxe0")
fd = os.open(sys.argv[1], os.O_RDONLY)
xrcd = XRCD(ctx, XRCDInitAttr(e.IBV_XRCD_INIT_ATTR_FD | e.IBV_XRCD_INIT_ATTR_OFLAGS, 0, fd))
attr = QPAttr(port_num=1)
attr.qp_access_flags = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE | e.IBV_ACCESS_REMOTE_READ \
    | e.IBV_ACCESS_REMOTE_ATOMIC
tgt = QP(ctx, QPInitAttrEx(qp_type=e.IBV_QPT_XRC_RECV, comp_mask=e.IBV_QP_INIT_ATTR_XRCD, xrcd=xrcd), attr)
print(json.dumps({"tgt": tgt.qp_num}), flush=True)
peer = json.loads(sys.stdin.readline())
attr.dest_qp_num = peer["ini"]
attr.rq_psn, attr.sq_psn = peer["psn"], 0
attr.max_dest_rd_atomic = attr.max_rd_atomic = 4
attr.min_rnr_timer, attr.timeout = 1, 14
attr.ah_attr = AHAttr(gr=GlobalRoute(dgid=ctx.query_gid(1, GID_INDEX), sgid_index=GID_INDEX), is_global=1,
                      port_num=1)
tgt.to_rts(attr)
print(json.dumps({"ready": True, "state": int(tgt.qp_state)}), flush=True)
sys.stdin.readline()
tgt.close()
xrcd.close()
os.close(fd)
ctx.close()
