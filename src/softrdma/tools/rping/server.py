"""rping's server side (rping.c: rping_bind_server, rping_run_server,
rping_run_persistent_server, rping_test_server) on the control block
(:class:`.cb.Rping`)."""

from __future__ import annotations

from ...pyverbs.cmid import AddrInfo
from ...pyverbs.enums import IBV_WR_RDMA_READ, IBV_WR_RDMA_WRITE
from ...pyverbs.librdmacm_enums import RAI_PASSIVE
from ...pyverbs.pyverbs_error import PyverbsError
from ..cma_common import _close, _err, _out, perror
from .cb import (
    CONNECT_REQUEST, DISCONNECTED, IDLE, RDMA_READ_ADV, RDMA_READ_COMPLETE, RDMA_WRITE_ADV, RDMA_WRITE_COMPLETE, Rping,
)


def bind_server(cb: Rping) -> int:
    try:
        cb.cm_id.bind_addr(AddrInfo(src=cb.sin[1], src_service=str(cb.port), flags=RAI_PASSIVE))
    except PyverbsError as e:
        perror("rdma_bind_addr", e)
        return -1
    cb.log("rdma_bind_addr successful\n")
    cb.log("rdma_listen\n")
    try:
        cb.cm_id.listen(3)
    except PyverbsError as e:
        perror("rdma_listen", e)
        return -1
    return 0


def serve_one(cb: Rping) -> int:
    """The part of rping_run_server after the CONNECT_REQUEST (also one
    connection of the persistent server)."""
    ret = cb.setup_connection(cb.child_cm_id)
    if ret:
        return ret
    ret = cb.accept()
    if ret:
        _err(f"connect error {ret}\n")
        cb.free_connection(cb.child_cm_id)
        return ret
    ret = test_server(cb)
    if ret and not cb.persistent:
        _err(f"rping server failed: {ret}\n")
    cb.disconnect(cb.child_cm_id)
    cb.drain_after_disconnect(0.2)
    cb.free_connection(cb.child_cm_id)
    _close(cb.child_cm_id)
    cb.child_cm_id = None
    return 0 if cb.persistent else ret


def run_server(cb: Rping) -> int:
    ret = bind_server(cb)
    if ret:
        return ret
    if cb.wait_for(CONNECT_REQUEST, "wait for CONNECT_REQUEST"):
        return -1
    return serve_one(cb)


def run_persistent_server(cb: Rping) -> int:
    ret = bind_server(cb)
    if ret:
        return ret
    while True:
        if cb.pending_requests:
            cb.child_cm_id = cb.pending_requests.pop(0)
            cb.state = CONNECT_REQUEST
        else:
            if cb.wait_for(CONNECT_REQUEST, "wait for CONNECT_REQUEST"):
                return -1
        cb._reset_conn()
        cb.sem = 0
        serve_one(cb)
        cb.state = IDLE


def test_server(cb: Rping) -> int:
    ret = 0
    while True:
        ret = cb.wait_for(RDMA_READ_ADV, "wait for RDMA_READ_ADV")
        if ret:
            break
        cb.log("server received sink adv\n")
        ret = cb.post_or_report(cb.post_rdma, IBV_WR_RDMA_READ, cb.remote_len, errors=(ValueError,))
        if ret:
            break
        cb.log("server posted rdma read req \n")
        ret = cb.wait_for(RDMA_READ_COMPLETE, "wait for RDMA_READ_COMPLETE")
        if ret:
            break
        cb.log("server received read complete\n")
        data = cb.rdma_mr.read(cb.size, 0)
        text = data.split(b"\0", 1)[0]
        if cb.verbose:
            _out(f"server ping data: {text.decode('latin-1')}\n")
        ret = cb.post_or_report(cb.post_send_info)
        if ret:
            break
        cb.log("server posted go ahead\n")
        ret = cb.wait_for(RDMA_WRITE_ADV, "wait for RDMA_WRITE_ADV")
        if ret:
            break
        cb.log("server received sink adv\n")
        length = min(len(text) + 1, cb.size)
        cb.log(f"rdma write from lkey {cb.rdma_mr.lkey:x} laddr {cb.rdma_mr.buf:x} len {length}\n")
        ret = cb.post_or_report(cb.post_rdma, IBV_WR_RDMA_WRITE, length, errors=(ValueError,))
        if ret:
            break
        ret = cb.wait_for(RDMA_WRITE_COMPLETE, "wait for RDMA_WRITE_COMPLETE")
        if ret:
            break
        cb.log("server rdma write complete \n")
        ret = cb.post_or_report(cb.post_send_info)
        if ret:
            break
        cb.log("server posted go ahead\n")
    return 0 if cb.state == DISCONNECTED else ret

