"""The daemon's control commands: their handlers (``HANDLERS``, one per
entry of the protocol's command table ``uapi.commands``) and what freeing
each kind of object undoes (``FREE``).

One module per object kind, as the kernel's uverbs_std_types_*.c:

===========  =============================================================
context      devices, open (the uverbs context), query_port, query_gid, query_pkey, query_gid_table
pd           alloc_pd, dealloc_pd, query_pd and query_mr (ibv_import_pd/mr)
mr           reg_mr, reg_dm_mr, dereg_mr, alloc_mw, dealloc_mw
odp          reg_user_mr (MRs on the process's own memory: ODP, implicit ODP), rereg_mr, advise_mr
dm           alloc_dm, free_dm (device memory), query_dm (ibv_import_dm)
cq           create/destroy_comp_channel, create/resize/destroy_cq
qp           create_qp, modify_qp, query_qp, destroy_qp (raw packet QPs: raw_qp)
raw_qp       create_rss_qp, and the raw packet QP branch of the qp commands
wq           create_wq, modify_wq, destroy_wq, create/destroy_rwq_ind_table
flow         create_flow, destroy_flow
srq          create_srq, modify_srq, resize_srq, query_srq, destroy_srq; tag
             matching: create_tm_srq, post_srq_ops
ah           create_ah, destroy_ah
mcast        attach_mcast, detach_mcast
capture      capture_start, capture_stop
link         links, link_add, link_set, link_delete (``rdma link``), ecn (``softrdma ecn``), umad_open
ipoib        ipoib: IPoIB interfaces (``softrdma ip`` on ib0: link add/del type ipoib, neigh, -d/-s link show)
restrack     resources (``rdma resource``)
pci          pci_functions, nvconfig, fw_reset, fw_burn, sriov_numvfs, vf_set (mst, mlxconfig, flint,
             mlxfwreset, SR-IOV VFs), devm_* (mlxdevm: sub-functions)
stat         stat_* (``rdma statistic``, ``softrdma top``)
cm           cm_* (rdma_cm, ucma's ABI)
xrcd         open_xrcd, close_xrcd, create_xrc_srq, create_xrc_qp (XRC)
===========  =============================================================

A handler is ``cmd_<op>(daemon, client, msg, fds) -> (reply, out_fds)``:
it raises VerbsError (or a bad request's KeyError, TypeError, ...) for the
errno reply, which ``Daemon.run_command`` makes of it.
"""

from __future__ import annotations

from typing import Callable

from . import ah, capture, cm, context, cq, dm, flow, ipoib, link, mcast, mr, odp, pci, pd, qp, raw_qp, restrack, srq, stat, wq, xrcd


#: the handler of every control command, by its op string (what each
#: request carries, and whether it needs an opened device, is the command
#: table's: ``uapi.commands``)
HANDLERS: dict[str, Callable] = {
    "devices": context.cmd_devices,
    "open": context.cmd_open,
    "query_port": context.cmd_query_port,
    "query_gid": context.cmd_query_gid,
    "query_pkey": context.cmd_query_pkey,
    "query_gid_table": context.cmd_query_gid_table,

    "alloc_pd": pd.cmd_alloc_pd,
    "dealloc_pd": pd.cmd_dealloc_pd,
    "query_pd": pd.cmd_query_pd,
    "query_mr": pd.cmd_query_mr,
    "query_dm": dm.cmd_query_dm,

    "reg_mr": mr.cmd_reg_mr,
    "dereg_mr": mr.cmd_dereg_mr,
    "rereg_mr": odp.cmd_rereg_mr,
    "reg_dm_mr": mr.cmd_reg_dm_mr,
    "alloc_mw": mr.cmd_alloc_mw,
    "dealloc_mw": mr.cmd_dealloc_mw,
    "alloc_dm": dm.cmd_alloc_dm,
    "free_dm": dm.cmd_free_dm,

    "create_comp_channel": cq.cmd_create_comp_channel,
    "destroy_comp_channel": cq.cmd_destroy_comp_channel,
    "create_cq": cq.cmd_create_cq,
    "resize_cq": cq.cmd_resize_cq,
    "destroy_cq": cq.cmd_destroy_cq,

    "create_qp": qp.cmd_create_qp,
    "modify_qp": qp.cmd_modify_qp,
    "query_qp": qp.cmd_query_qp,
    "destroy_qp": qp.cmd_destroy_qp,

    "create_srq": srq.cmd_create_srq,
    "modify_srq": srq.cmd_modify_srq,
    "resize_srq": srq.cmd_resize_srq,
    "query_srq": srq.cmd_query_srq,
    "destroy_srq": srq.cmd_destroy_srq,

    "create_ah": ah.cmd_create_ah,
    "destroy_ah": ah.cmd_destroy_ah,

    "attach_mcast": mcast.cmd_attach_mcast,
    "detach_mcast": mcast.cmd_detach_mcast,

    "capture_start": capture.cmd_capture_start,
    "capture_stop": capture.cmd_capture_stop,

    "links": link.cmd_links,
    "link_add": link.cmd_link_add,
    "link_set": link.cmd_link_set,
    "link_delete": link.cmd_link_delete,
    "umad_open": link.cmd_umad_open,
    "ecn": link.cmd_ecn,
    "ipoib": ipoib.cmd_ipoib,

    "resources": restrack.cmd_resources,

    "stat_get": stat.cmd_stat_get,
    "stat_dump": stat.cmd_stat_dump,
    "stat_set": stat.cmd_stat_set,
    "stat_del": stat.cmd_stat_del,
    "stat_get_status": stat.cmd_stat_get_status,
    "stat_snapshot": stat.cmd_stat_snapshot,

    "cm_create_id": cm.cmd_cm_create_id,
    "cm_destroy_id": cm.cmd_cm_destroy_id,
    "cm_set_option": cm.cmd_cm_set_option,
    "cm_bind_addr": cm.cmd_cm_bind_addr,
    "cm_resolve_addr": cm.cmd_cm_resolve_addr,
    "cm_resolve_route": cm.cmd_cm_resolve_route,
    "cm_listen": cm.cmd_cm_listen,
    "cm_connect": cm.cmd_cm_connect,
    "cm_accept": cm.cmd_cm_accept,
    "cm_reject": cm.cmd_cm_reject,
    "cm_disconnect": cm.cmd_cm_disconnect,
    "cm_notify": cm.cmd_cm_notify,
    "cm_init_qp_attr": cm.cmd_cm_init_qp_attr,
    "cm_query": cm.cmd_cm_query,
    "cm_channel_token": cm.cmd_cm_channel_token,
    "cm_migrate_id": cm.cmd_cm_migrate_id,
    "cm_join_multicast": cm.cmd_cm_join_multicast,
    "cm_leave_multicast": cm.cmd_cm_leave_multicast,

    "reg_user_mr": odp.cmd_reg_user_mr,
    "advise_mr": odp.cmd_advise_mr,
    "create_rss_qp": raw_qp.cmd_create_rss_qp,
    "create_wq": wq.cmd_create_wq,
    "modify_wq": wq.cmd_modify_wq,
    "destroy_wq": wq.cmd_destroy_wq,
    "create_rwq_ind_table": wq.cmd_create_rwq_ind_table,
    "destroy_rwq_ind_table": wq.cmd_destroy_rwq_ind_table,
    "create_flow": flow.cmd_create_flow,
    "destroy_flow": flow.cmd_destroy_flow,
    "create_tm_srq": srq.cmd_create_tm_srq,
    "post_srq_ops": srq.cmd_post_srq_ops,
    "open_xrcd": xrcd.cmd_open_xrcd,
    "close_xrcd": xrcd.cmd_close_xrcd,
    "create_xrc_srq": xrcd.cmd_create_xrc_srq,
    "create_xrc_qp": xrcd.cmd_create_xrc_qp,

    "pci_functions": pci.cmd_pci_functions,
    "nvconfig": pci.cmd_nvconfig,
    "fw_reset": pci.cmd_fw_reset,
    "fw_burn": pci.cmd_fw_burn,
    "sriov_numvfs": pci.cmd_sriov_numvfs,
    "vf_set": pci.cmd_vf_set,
    "devm_show": pci.cmd_devm_show,
    "devm_port_add": pci.cmd_devm_port_add,
    "devm_port_set": pci.cmd_devm_port_set,
    "devm_port_del": pci.cmd_devm_port_del,
}

#: what destroying an object of each kind undoes beyond forgetting its
#: handle (uverbs' destroy_hw per type); a PD and an AH hold nothing
FREE: dict[str, Callable] = {
    "qp": qp.free_qp,
    "srq": srq.free_srq,
    "cq": cq.free_cq,
    "mr": mr.free_mr,
    "mw": mr.free_mw,
    "dm": dm.free_dm,
    "channel": cq.free_channel,
    "capture": capture.free_capture,
    "cm_id": cm.free_cm_id,
    "flow": flow.free_flow,
    "wq": wq.free_wq,
    "rwq_ind_table": wq.free_rwq_ind_table,
    "xrcd": xrcd.free_xrcd,
}
