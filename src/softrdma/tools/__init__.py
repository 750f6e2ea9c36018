"""softrdma.tools: the RDMA tools users know, same flags, same output.

Each tool is a module with ``main(argv: list[str]) -> int``; ``TOOLS`` maps
the command name (as typed after ``softrdma``) to its module.  The tools
use only the public verbs API (``softrdma.verbs``) and the daemon's
management commands (``softrdma.verbs.device.management()``); ``opensm``
is ``softrdma.sm``'s command line, which speaks ibsim's protocol instead.
"""

TOOLS = {
    "ibv_devices": "softrdma.tools.ibv_devices",
    "ibv_devinfo": "softrdma.tools.ibv_devinfo",
    "ibstat": "softrdma.tools.ibstat",
    "ibdump": "softrdma.tools.ibdump",
    "ibv_rc_pingpong": "softrdma.tools.pingpong",
    "ibv_ud_pingpong": "softrdma.tools.pingpong",
    "rdma": "softrdma.tools.rdma",
    "top": "softrdma.tools.top",
    "ib_send_bw": "softrdma.tools.perftest",
    "ib_write_bw": "softrdma.tools.perftest",
    "ib_read_bw": "softrdma.tools.perftest",
    "ib_atomic_bw": "softrdma.tools.perftest",
    "ib_send_lat": "softrdma.tools.perftest",
    "ib_write_lat": "softrdma.tools.perftest",
    "ib_read_lat": "softrdma.tools.perftest",
    "ib_atomic_lat": "softrdma.tools.perftest",
    "opensm": "softrdma.sm.main",
    "rping": "softrdma.tools.rping",
    "ucmatose": "softrdma.tools.ucmatose",
    "udaddy": "softrdma.tools.udaddy",
    "mckey": "softrdma.tools.mckey",
    "rstream": "softrdma.tools.rstream",
    "ibnetdiscover": "softrdma.tools.ibdiag.ibnetdiscover",
    "ibhosts": "softrdma.tools.ibdiag.ibhosts",
    "ibswitches": "softrdma.tools.ibdiag.ibhosts",
    "ibnodes": "softrdma.tools.ibdiag.ibhosts",
    "iblinkinfo": "softrdma.tools.ibdiag.iblinkinfo",
    "ibroute": "softrdma.tools.ibdiag.ibroute",
    "ibtracert": "softrdma.tools.ibdiag.ibtracert",
    "smpquery": "softrdma.tools.ibdiag.smpquery",
    "perfquery": "softrdma.tools.ibdiag.perfquery",
    "sminfo": "softrdma.tools.ibdiag.sminfo",
    "saquery": "softrdma.tools.ibdiag.saquery",
    "ibqueryerrors": "softrdma.tools.ibdiag.ibqueryerrors",
    "ibping": "softrdma.tools.ibdiag.ibping",
    "ecn": "softrdma.tools.ecn",
    "ecn-switch": "softrdma.tools.ecnswitch",
    "ibdiagnet": "softrdma.tools.ibdiag.ibdiagnet",
    "mst": "softrdma.tools.mft.mst",
    "mlxconfig": "softrdma.tools.mft.mlxconfig",
    "flint": "softrdma.tools.mft.flint",
    "mlxfwreset": "softrdma.tools.mft.mlxfwreset",
    "mlxdevm": "softrdma.tools.mlxdevm",
    "ip": "softrdma.tools.ip",
    "sysfs-write": "softrdma.tools.sysfs_write",
}

#: ``softrdma --help`` lines of the tools that are softrdma's own (the rest
#: are "<name>, as the real tool")
HELP = {
    "ecn": "a device's ECN / DCQCN settings (mlx5's ecn/roce_np and ecn/roce_rp knobs), shown and set",
    "ecn-switch": "an ECN-marking switch between network namespaces (nftables), to study congestion control",
    "ip": "iproute2's ip link show/set for the SR-IOV VFs (vf N mac, trust, spoofchk, state) of a softrdma PF",
    "sysfs-write": "echo VALUE > a softrdma device's sriov_numvfs or sriov/N/ file, with the kernel's errno",
    "top": "live view of every softrdma port and QP (rates, retransmits, NAKs, RNR, QP states)",
    "opensm": "subnet manager with opensm's options and routing (minhop, updn, ftree) over ibsim's protocol",
}
