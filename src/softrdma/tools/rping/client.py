"""rping's client side (rping.c: rping_bind_client, rping_connect_client,
rping_test_client, rping_run_client) on the control block (:class:`.cb.Rping`)."""

from __future__ import annotations

import os

from ...pyverbs.cmid import AddrInfo
from ...pyverbs.pyverbs_error import PyverbsError
from ..cma_common import _err, _out, perror
from .cb import (
    CONNECTED, DISCONNECTED, RDMA_READ_ADV, RDMA_WRITE_ADV, RDMA_WRITE_COMPLETE, ROUTE_RESOLVED, RPING_MSG_FMT, Rping,
)


def bind_client(cb: Rping) -> int:
    try:
        ai = AddrInfo(src=cb.ssource[1] if cb.ssource else None, dst=cb.sin[1],
                      dst_service=str(cb.port))
        cb.cm_id.resolve_addr(ai, 2000)
    except PyverbsError as e:
        perror("rdma_resolve_addr", e)
        return -1
    if cb.wait_for(ROUTE_RESOLVED, "waiting for addr/route resolution"):
        return -1
    cb.log("rdma_resolve_addr - rdma_resolve_route successful\n")
    return 0


def connect_client(cb: Rping) -> int:
    try:
        cb.cm_id.connect(cb.conn_param())
    except PyverbsError as e:
        perror("rdma_connect", e)
        return -1
    if cb.wait_for(CONNECTED, "wait for CONNECTED"):
        return -1
    if cb.self_create_qp:
        ret = cb.self_modify_qp(cb.cm_id)
        if ret:
            _err("rping_modify_qp: " + os.strerror(-ret) + "\n")
            return ret
        try:
            cb.cm_id.establish()
        except PyverbsError as e:
            perror("rdma_establish", e)
            return -1
    cb.log("rdma_connect successful\n")
    return 0


def test_client(cb: Rping) -> int:
    ret = 0
    start = 65
    ping = 0
    while not cb.count or ping < cb.count:
        cb.state = RDMA_READ_ADV
        head = (RPING_MSG_FMT % ping).encode()[:cb.size - 1]
        buf = bytearray(cb.size)
        buf[:len(head)] = head
        c = start
        for i in range(len(head), cb.size):
            buf[i] = c
            c += 1
            if c > 122:
                c = 65
        start += 1
        if start > 122:
            start = 65
        buf[cb.size - 1] = 0
        cb.start_mr.write(bytes(buf), cb.size, 0)
        cb.format_send(cb.start_mr)
        ret = cb.post_or_report(cb.post_send_info)
        if ret:
            break
        ret = cb.wait_for(RDMA_WRITE_ADV, "wait for RDMA_WRITE_ADV")
        if ret:
            break
        cb.format_send(cb.rdma_mr)
        ret = cb.post_or_report(cb.post_send_info)
        if ret:
            break
        ret = cb.wait_for(RDMA_WRITE_COMPLETE, "wait for RDMA_WRITE_COMPLETE")
        if ret:
            break
        got = cb.rdma_mr.read(cb.size, 0)
        if cb.validate and got != bytes(buf):
            _err("data mismatch!\n")
            ret = -1
            break
        if cb.verbose:
            text = got.split(b"\0", 1)[0].decode("latin-1")
            _out(f"ping data: {text}\n")
        ping += 1
    return 0 if cb.state == DISCONNECTED else ret


def run_client(cb: Rping) -> int:
    ret = bind_client(cb)
    if ret:
        return ret
    ret = cb.setup_connection(cb.cm_id)
    if ret:
        return ret
    ret = connect_client(cb)
    if ret:
        _err(f"connect error {ret}\n")
    else:
        ret = test_client(cb)
        if ret:
            _err(f"rping client failed: {ret}\n")
        cb.disconnect(cb.cm_id)
        cb.drain_after_disconnect()
    cb.free_connection(cb.cm_id)
    return ret


