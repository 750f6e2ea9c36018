"""Which device a diag runs on (``-C DEV -P PORT``): ``device_for(ca,
ca_port)`` is the device a tool's options name -- ``-C`` naming a
softrdma device, or, with neither ``-C`` nor the ibsim environment, the
first IB device whose port is Active (libibumad's first usable CA) -- or
None for the ibsim path.  The port itself is ``mgmt.devport.DevicePort``.
"""

from __future__ import annotations

import os

from ...mgmt.devport import DevicePort, ib_links

SIM_CA = "ibsim0"                 # umad2sim's one CA: the ibsim path


def device_for(ca: str | None, ca_port: int) -> str | None:
    if ca == SIM_CA:
        return None
    if ca is not None:
        return ca if any(d["ifname"] == ca for d in ib_links()) else None
    env = os.environ
    if env.get("IBSIM_SOCKNAME") or env.get("IBSIM_SERVER_NAME"):
        return None
    for d in ib_links():
        for p in d.get("ports") or [d]:
            if p["port_attr"]["state"] == 4 and ca_port in (0, p["port"]):
                return d["ifname"]
    return None


__all__ = ["DevicePort", "device_for"]
