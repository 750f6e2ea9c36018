"""``sminfo [options] <sm_lid|sm_dr_path> [modifier]`` (infiniband-diags 44
sminfo.c): SMInfo Get (Set with a modifier and -s/-p/-a) to the given
port or, by default, the SM LID of the own port.  The SMInfo agent is
the SM itself: without a resident SM the query fails as the real one does.
"""

from __future__ import annotations

import sys

from ...wire import smp
from ..libc import strtoul
from . import common
from .common import ibexit
from .rpc import METHOD_GET, METHOD_SET, PortId

OPTS = [
    ("state", "s", 1, "<0-3>", "set SM state"),
    ("priority", "p", 1, "<0-15>", "set SM priority"),
    ("activity", "a", 1, "", "set activity count"),
]
STATESTR = ["SMINFO_NOTACT", "SMINFO_DISCOVER", "SMINFO_STANDBY", "SMINFO_MASTER"]


def _atoi(s):
    import re
    m = re.match(r"\s*([+-]?\d+)", s)
    return int(m.group(1)) if m else 0


def main(argv, prog="sminfo") -> int:
    st = {"act": 0, "prio": 0, "state": 2}

    def opt(c, arg):
        key = {"a": "act", "s": "state", "p": "prio"}[c]
        st[key] = strtoul(arg) & 0xFFFFFFFF

    def body():
        cfg, args = common.parse(argv, prog, OPTS, "sK", "<sm_lid|sm_dr_path> [modifier]", None, opt)
        mod = _atoi(args[1]) if len(args) > 1 else 0
        with common.open_port(prog, cfg) as mad:
            if args:
                portid = common.resolve_portid(mad, args[0], cfg.dest_type)
                if portid is None:
                    raise ibexit(prog, f"can't resolve destination port {args[0]}")
            else:
                if not mad.sm_lid:
                    raise ibexit(prog, "can't resolve sm port (null)")
                portid = PortId(mad.sm_lid)
            data = smp.SM_INFO.encode(SmInfoGuid=0, SmInfoKey=0, SmActivity=st["act"],
                                      SmPriority=st["prio"] & 0xF, SmState=st["state"] & 0xF)
            d = mad.smp_query(portid, smp.SmpAttr.SM_INFO, mod & 0xFFFFFFFF if mod else 0,
                              bytes(data), METHOD_SET if mod else METHOD_GET)
            if d is None:
                raise ibexit(prog, "query")
            si = smp.SM_INFO.decode(d)
            state = si["SmState"]
            sys.stdout.write(f"sminfo: sm lid {portid.lid} sm guid 0x{si['SmInfoGuid']:x}, activity "
                             f"count {si['SmActivity']} priority {si['SmPriority']} state {state} "
                             f"{STATESTR[state] if state < 4 else '???'}\n")
        return 0
    return common.run(prog, body)
