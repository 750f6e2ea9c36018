"""The daemon's control commands: the one table of them (``COMMANDS``) and
what freeing each kind of object undoes (``FREE``).

One module per object kind, as the kernel's uverbs_std_types_*.c:

===========  =============================================================
context      devices, open (the uverbs context), query_port, query_gid
pd           alloc_pd, dealloc_pd
mr           reg_mr, dereg_mr, alloc_mw, dealloc_mw
cq           create/destroy_comp_channel, create/destroy_cq
qp           create_qp, modify_qp, query_qp, destroy_qp
srq          create_srq, modify_srq, destroy_srq
ah           create_ah, destroy_ah
mcast        attach_mcast, detach_mcast
capture      capture_start, capture_stop
link         links, link_add, link_set, link_delete (``rdma link``)
restrack     resources (``rdma resource``)
stat         stat_* (``rdma statistic``, ``softrdma top``)
cm           cm_* (rdma_cm, ucma's ABI)
===========  =============================================================

A handler is ``cmd_<op>(daemon, client, msg, fds) -> (reply, out_fds)``:
it raises VerbsError (or a bad request's KeyError, TypeError, ...) for the
errno reply, which ``Daemon.run_command`` makes of it.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

from . import ah, capture, cm, context, cq, link, mcast, mr, pd, qp, restrack, srq, stat


class Command(NamedTuple):
    handler: Callable
    #: the connection must have opened a device first (else EINVAL); the
    #: event channels of rdma_cm and the management commands need none
    needs_device: bool = True


#: every control command, by its op string
COMMANDS: dict[str, Command] = {
    "devices": Command(context.cmd_devices, False),
    "open": Command(context.cmd_open, False),
    "query_port": Command(context.cmd_query_port),
    "query_gid": Command(context.cmd_query_gid),

    "alloc_pd": Command(pd.cmd_alloc_pd),
    "dealloc_pd": Command(pd.cmd_dealloc_pd),

    "reg_mr": Command(mr.cmd_reg_mr),
    "dereg_mr": Command(mr.cmd_dereg_mr),
    "alloc_mw": Command(mr.cmd_alloc_mw),
    "dealloc_mw": Command(mr.cmd_dealloc_mw),

    "create_comp_channel": Command(cq.cmd_create_comp_channel),
    "destroy_comp_channel": Command(cq.cmd_destroy_comp_channel),
    "create_cq": Command(cq.cmd_create_cq),
    "destroy_cq": Command(cq.cmd_destroy_cq),

    "create_qp": Command(qp.cmd_create_qp),
    "modify_qp": Command(qp.cmd_modify_qp),
    "query_qp": Command(qp.cmd_query_qp),
    "destroy_qp": Command(qp.cmd_destroy_qp),

    "create_srq": Command(srq.cmd_create_srq),
    "modify_srq": Command(srq.cmd_modify_srq),
    "destroy_srq": Command(srq.cmd_destroy_srq),

    "create_ah": Command(ah.cmd_create_ah),
    "destroy_ah": Command(ah.cmd_destroy_ah),

    "attach_mcast": Command(mcast.cmd_attach_mcast),
    "detach_mcast": Command(mcast.cmd_detach_mcast),

    "capture_start": Command(capture.cmd_capture_start),
    "capture_stop": Command(capture.cmd_capture_stop),

    "links": Command(link.cmd_links, False),
    "link_add": Command(link.cmd_link_add, False),
    "link_set": Command(link.cmd_link_set, False),
    "link_delete": Command(link.cmd_link_delete, False),

    "resources": Command(restrack.cmd_resources, False),

    "stat_get": Command(stat.cmd_stat_get, False),
    "stat_dump": Command(stat.cmd_stat_dump, False),
    "stat_set": Command(stat.cmd_stat_set, False),
    "stat_del": Command(stat.cmd_stat_del, False),
    "stat_get_status": Command(stat.cmd_stat_get_status, False),
    "stat_snapshot": Command(stat.cmd_stat_snapshot, False),

    "cm_create_id": Command(cm.cmd_cm_create_id, False),
    "cm_destroy_id": Command(cm.cmd_cm_destroy_id, False),
    "cm_set_option": Command(cm.cmd_cm_set_option, False),
    "cm_bind_addr": Command(cm.cmd_cm_bind_addr, False),
    "cm_resolve_addr": Command(cm.cmd_cm_resolve_addr, False),
    "cm_resolve_route": Command(cm.cmd_cm_resolve_route, False),
    "cm_listen": Command(cm.cmd_cm_listen, False),
    "cm_connect": Command(cm.cmd_cm_connect, False),
    "cm_accept": Command(cm.cmd_cm_accept, False),
    "cm_reject": Command(cm.cmd_cm_reject, False),
    "cm_disconnect": Command(cm.cmd_cm_disconnect, False),
    "cm_notify": Command(cm.cmd_cm_notify, False),
    "cm_init_qp_attr": Command(cm.cmd_cm_init_qp_attr, False),
    "cm_query": Command(cm.cmd_cm_query, False),
    "cm_channel_token": Command(cm.cmd_cm_channel_token, False),
    "cm_migrate_id": Command(cm.cmd_cm_migrate_id, False),
    "cm_join_multicast": Command(cm.cmd_cm_join_multicast, False),
    "cm_leave_multicast": Command(cm.cmd_cm_leave_multicast, False),
}

#: what destroying an object of each kind undoes beyond forgetting its
#: handle (uverbs' destroy_hw per type); a PD and an AH hold nothing
FREE: dict[str, Callable] = {
    "qp": qp.free_qp,
    "srq": srq.free_srq,
    "cq": cq.free_cq,
    "mr": mr.free_mr,
    "mw": mr.free_mw,
    "channel": cq.free_channel,
    "capture": capture.free_capture,
    "cm_id": cm.free_cm_id,
}
