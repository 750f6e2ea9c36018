"""``softrdma ecn``: a device's ECN / DCQCN settings, shown and set.

What an mlx5 user reads and writes under ``/sys/class/net/<netdev>/ecn``
(``roce_np/`` and ``roce_rp/``: a file per knob, ``enable/<priority>``),
through the daemon (the files are in the run directory's ``sys/ecn/<netdev>``
too, and writing them works as on mlx5)::

    softrdma ecn                               every device's settings
    softrdma ecn rxe0                          one device's
    softrdma ecn rxe0 roce_rp rpg_ai_rate 10   set a knob
    softrdma ecn rxe0 roce_np enable 3 0       turn the notification point off for priority 3
    softrdma ecn rxe0 traffic_class 96         the traffic class of address vectors naming none

Output: one ``point/knob value`` line per setting, in the order the files
list, as ``grep . ecn/roce_*/*`` prints them.
"""

from __future__ import annotations

import sys

from ..cliargs import Parser
from ..verbs.device import management
from ..verbs.errors import PyverbsError

POINTS = ("roce_np", "roce_rp")


def _changes(words: list[str]) -> dict:
    """``roce_xx KNOB VALUE``, ``roce_xx enable PRIO 0|1`` and
    ``traffic_class N``, in any number, as the ``ecn`` command's ``set``."""
    out: dict = {}
    i = 0
    while i < len(words):
        w = words[i]
        if w == "traffic_class" and i + 1 < len(words):
            out["traffic_class"] = words[i + 1]
            i += 2
        elif w in POINTS and i + 2 < len(words) and words[i + 1] == "enable" and i + 3 < len(words):
            out.setdefault(w, {}).setdefault("enable", {})[words[i + 2]] = words[i + 3]
            i += 4
        elif w in POINTS and i + 2 < len(words) and words[i + 1] != "enable":
            out.setdefault(w, {})[words[i + 1]] = words[i + 2]
            i += 3
        else:
            raise ValueError(f"expected 'roce_np|roce_rp KNOB VALUE', 'roce_np|roce_rp enable PRIO 0|1' or"
                             f" 'traffic_class N' at {' '.join(words[i:]) or 'the end'!r}")
    for point in out.values():
        if isinstance(point, dict):
            for knob, v in point.items():
                if knob != "enable":
                    _int(v)
                else:
                    for prio, on in v.items():
                        _int(prio), _int(on)
        else:
            _int(point)
    return out


def _int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None


def show(name: str, netdev: str, ecn: dict, out=sys.stdout) -> None:
    out.write(f"{name} ({netdev}):\n")
    for point in POINTS:
        for knob, v in sorted(ecn[point].items()):
            if knob == "enable":
                for prio, on in enumerate(v):
                    out.write(f"  {point}/enable/{prio} {on}\n")
            else:
                out.write(f"  {point}/{knob} {v}\n")
    out.write(f"  traffic_class {ecn['traffic_class']}\n")


def main(argv: list[str], prog: str = "ecn") -> int:
    p = Parser(prog=f"softrdma {prog}", description="show or set a device's ECN / DCQCN settings (mlx5's ecn/ knobs)")
    p.add_argument("dev", nargs="?", help="the RDMA device (default: every device)")
    p.add_argument("setting", nargs="*", help="roce_np|roce_rp KNOB VALUE, roce_np|roce_rp enable PRIO 0|1,"
                                              " traffic_class N")
    a = p.parse_args(argv)
    try:
        changes = _changes(a.setting)
    except ValueError as e:
        p.error(str(e))
    if changes and a.dev is None:
        p.error("a device is needed to set anything")
    try:
        conn = management()
        links = conn.call("links")[0]["links"]
        names = [(ln["ifname"], ln.get("netdev", "")) for ln in links]
        if a.dev is not None:
            if a.dev not in dict(names):
                print(f"softrdma {prog}: no device {a.dev!r}", file=sys.stderr)
                return 1
            names = [(a.dev, dict(names)[a.dev])]
        for name, netdev in names:
            r = conn.call("ecn", name=name, set=changes if a.dev is not None else {})[0]
            show(name, netdev, r["ecn"])
    except PyverbsError as e:
        print(f"softrdma {prog}: {e}", file=sys.stderr)
        return 1
    return 0
