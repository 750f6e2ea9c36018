"""``ibv_devices``: rdma-core 44's ``libibverbs/examples/device_list.c``
over softrdma's verbs API (docs/formats/ibv_devices.md).

There is no option parsing at all (arguments are ignored, as in the real
tool).  Every line is four spaces, the name padded to 16 columns, a TAB and
the node GUID as 16 lowercase hex digits.  No daemon = no devices: the two
header lines and exit 0, as libibverbs with uverbs loaded and no device.
If the device list cannot be read, ``perror("Failed to get IB devices
list")`` and exit 1.
"""

from __future__ import annotations

import os
import sys

from ..verbs.errors import PyverbsError
from .ibv_devinfo import errno_of, device_list, guid_int, perror


def main(argv: list[str], prog: str = "ibv_devices") -> int:
    try:
        devs = device_list()
    except (PyverbsError, OSError) as e:
        perror("Failed to get IB devices list", errno_of(e))
        return 1
    out = ["    %-16s\t   node GUID\n" % "device", "    %-16s\t----------------\n" % "------"]
    for d in devs:
        name = d.name.decode() if isinstance(d.name, bytes) else str(d.name)
        out.append("    %-16s\t%016x\n" % (name, guid_int(d.node_guid)))
    sys.stdout.write("".join(out))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog=os.path.basename(sys.argv[0])))
