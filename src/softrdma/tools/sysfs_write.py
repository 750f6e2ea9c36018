"""``softrdma sysfs-write PATH VALUE``: ``echo VALUE > PATH`` for the
writable SR-IOV files of a softrdma ConnectX device, with the errno the
kernel's write returns (bash prints it as ``echo: write error: ...``).

PATH is the file as on a real host: ``/sys/class/infiniband/<dev>/device/
sriov_numvfs`` or ``/sys/class/net/<netdev>/device/sriov_numvfs``, and
``.../device/sriov/<N>/{policy,link_state,trust,spoofcheck,mac,vlan,max_tx_rate,
min_tx_rate}`` (mlx5's per-VF files).  The files in the daemon's sysfs tree can be written too
(the daemon applies what it finds there within a second, logging a value
it refuses); this command is the way to see the errno.
"""

from __future__ import annotations

import errno
import os
import re
import sys

from ..verbs.device import management
from ..verbs.errors import PyverbsError

PATH_RE = re.compile(r"(?:^|/)class/(infiniband|net)/([^/]+)/device/"
                     r"(sriov_numvfs|mlx5_num_vfs|sriov/(\d+)/([a-z_]+))/?$")
VF_FILES = {"policy": "policy", "link_state": "state", "trust": "trust", "spoofcheck": "spoofchk", "mac": "mac",
            "max_tx_rate": "max_tx_rate", "min_tx_rate": "min_tx_rate", "vlan": "vlan_file", "node": "node",
            "port": "port"}


def main(argv: list[str], prog: str = "sysfs-write") -> int:
    if len(argv) != 2:
        sys.stderr.write(f"usage: softrdma {prog} PATH VALUE\n")
        return 2
    path, value = argv
    m = PATH_RE.search(path)
    if m is None or (m[5] is not None and m[5] not in VF_FILES):
        sys.stderr.write(f"softrdma {prog}: {path}: {os.strerror(errno.EACCES)}\n")
        return 1
    kind, name, _, vf, attr = m.groups()
    try:
        conn = management()
        if kind == "net":
            pf = [fn for fn in conn.call("pci_functions")[0]["functions"] if fn["netdev"] == name]
            if not pf:
                sys.stderr.write(f"softrdma {prog}: {path}: {os.strerror(errno.ENOENT)}\n")
                return 1
            name = pf[0]["name"]
        if vf is None:
            conn.call("sriov_numvfs", name=name, numvfs=value.strip())
        else:
            text = value.strip()
            if attr in ("trust", "spoofcheck"):
                if text not in ("ON", "OFF"):
                    raise PyverbsError(f"{attr}: expected ON or OFF", errno.EINVAL)
            conn.call("vf_set", name=name, vf=int(vf), set={VF_FILES[attr]: text})
    except PyverbsError as e:
        code = getattr(e, "error_code", 0) or errno.EIO
        sys.stderr.write(f"softrdma {prog}: write error: {os.strerror(code)}\n")
        return 1
    return 0
