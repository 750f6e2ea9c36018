"""``rdma dev``: iproute2 6.1's rdma/dev.c over softrdmad -- ``dev [show
[DEV]]`` (node type, firmware, GUIDs, with -d the device capabilities);
``dev set`` is refused (the daemon cannot rename devices or move them
between namespaces)."""

from __future__ import annotations

import errno
import os

from .utils import Rd, table_str

NODE_TYPES = ("unknown", "ca", "switch", "router", "rnic", "usnic", "usnic_udp", "unspecified")
DEV_CAPS = {0: "RESIZE_MAX_WR", 1: "BAD_PKEY_CNTR", 2: "BAD_QKEY_CNTR", 3: "RAW_MULTI", 4: "AUTO_PATH_MIG",
            5: "CHANGE_PHY_PORT", 6: "UD_AV_PORT_ENFORCE_PORT_ENFORCE", 7: "CURR_QP_STATE_MOD",
            8: "SHUTDOWN_PORT", 9: "INIT_TYPE", 10: "PORT_ACTIVE_EVENT", 11: "SYS_IMAGE_GUID",
            12: "RC_RNR_NAK_GEN", 13: "SRQ_RESIZE", 14: "N_NOTIFY_CQ", 15: "LOCAL_DMA_LKEY", 17: "MEM_WINDOW",
            18: "UD_IP_CSUM", 19: "UD_TSO", 20: "XRC", 21: "MEM_MGT_EXTENSIONS", 22: "BLOCK_MULTICAST_LOOPBACK",
            23: "MEM_WINDOW_TYPE_2A", 24: "MEM_WINDOW_TYPE_2B", 25: "RC_IP_CSUM", 26: "RAW_IP_CSUM",
            27: "CROSS_CHANNEL", 29: "MANAGED_FLOW_STEERING", 30: "SIGNATURE_HANDOVER", 31: "ON_DEMAND_PAGING",
            32: "SG_GAPS_REG", 33: "VIRTUAL_FUNCTION", 34: "RAW_SCATTER_FCS", 35: "RDMA_NETDEV_OPA_VNIC",
            36: "PCI_WRITE_END_PADDING"}
DEV_HELP = ("Usage: {0} dev show [DEV]\n"
            "       {0} dev set [DEV] name DEVNAME\n"
            "       {0} dev set [DEV] netns NSNAME\n"
            "       {0} dev set [DEV] adaptive-moderation [on|off]\n")


def cmd_dev(rd: Rd) -> int:
    def dev_help():
        rd.out(DEV_HELP.format(rd.prog))
        return 0

    def dev_no_args():
        links = rd.links_now()
        if links is None:
            return -errno.EIO
        d = links.get(rd.dev["ifindex"])
        if d is None:
            rd.err(f"error: {os.strerror(errno.EINVAL)}")
            return -errno.EINVAL
        rd.open_obj()
        rd.pr("ifindex", d["ifindex"], f"{d['ifindex']}: ")
        rd.pr("ifname", d["ifname"], f"{d['ifname']}: ")
        nt = table_str(NODE_TYPES, d.get("node_type", 1), "unknown")
        rd.pr("node_type", nt, f"node_type {nt} ")
        if d.get("fw"):
            rd.pr("fw", d["fw"], f"fw {d['fw']} ")
        rd.pr("node_guid", d["node_guid"], f"node_guid {d['node_guid']} ")
        rd.pr("sys_image_guid", d["sys_image_guid"], f"sys_image_guid {d['sys_image_guid']} ")
        if rd.show_details:
            rd.on_off("adaptive-moderation", bool(d.get("dim", False)))
            caps = int(d.get("caps", 0))
            rd.pt("\n    caps: <")
            rd.open_array("caps", None)
            idx = 0
            while caps:
                if caps & 1:
                    nm = DEV_CAPS.get(idx, "UNKNOWN")
                    rd.pr(None, nm, f"{nm}, " if caps >> 1 else nm)
                caps >>= 1
                idx += 1
            rd.close_array(">")
        rd.newline()
        return 0

    def dev_one_show():
        return rd.exec_cmd([(None, dev_no_args)], "parameter")

    def dev_show():
        return rd.exec_dev(dev_one_show)

    def dev_set():
        def unsupported():
            rd.err(f"error: {os.strerror(errno.EOPNOTSUPP)}")
            return -errno.EOPNOTSUPP

        def set_name():
            if rd.no_arg():
                rd.err("Please provide device new name.")
                return -errno.EINVAL
            return unsupported()

        def one_set():
            return rd.exec_cmd([(None, dev_help), ("name", set_name), ("netns", unsupported),
                                ("adaptive-moderation", unsupported)], "parameter")

        return rd.exec_require_dev(one_set)

    return rd.exec_cmd([(None, dev_show), ("show", dev_show), ("list", dev_show), ("set", dev_set),
                        ("help", dev_help)], "dev command")
