"""A ConnectX-like device's non-volatile configuration (what ``mlxconfig``
reads and writes), kept per device in the daemon's run directory.

Each parameter has a default, a *current* value (what the firmware booted
with) and a *next boot* value (what ``mlxconfig set`` stored).  A set
changes only the next-boot value; a firmware reset (``mlxfwreset``, or
the daemon starting again: its devices boot) makes it current.  ``reset``
puts every next-boot value back to its default.

The store is one JSON file per device, ``RUN/nvconfig/<dev>.json``
(``{"next": {NAME: int}, "current": {NAME: int}, "cables": {PORT:
{...}}}``, only values that differ from the default are kept), written through a temporary file and a
rename so a crash leaves the old or the new one.

Parameters (mlxconfig's names, value names and ranges):

==============  ==========================================================
SRIOV_EN        False(0) / True(1): the SR-IOV capability is exposed
NUM_OF_VFS      0 .. the card's maximum (127 on a ConnectX-5): sriov_totalvfs
LINK_TYPE_P1    IB(1) / ETH(2) / VPI(3): port 1's protocol.  IB and ETH
                can be applied (at the next boot the port becomes an
                InfiniBand port on its fabric, or a RoCE port on its
                netdev: ``device.vpi``); VPI (auto-sensing) is refused
                with EOPNOTSUPP
LINK_TYPE_P2    the same for port 2 (a 2-port device; the mapping is per
                port)
PF_TOTAL_SF     0 .. 255: the sub-functions the PF may have (``mlxdevm port
                add ... flavour pcisf``); 0: SF ports are not supported
RDMA_RESOURCE_PROFILE
                PF_HEAVY(0) / EQUAL(1): how the card's RDMA objects are
                divided among the PF, its VFs and SFs (``device.resprofile``)
==============  ==========================================================

Beside the parameters the store keeps each port's *cables*: where the
port is plugged in for each protocol -- ``{"eth": {"netdev": NAME}}``,
``{"ib": {"fabric": BASE, "node": CA, "ca_port": N}}`` -- recorded each
time the port comes up on one (and set with ``mlxconfig cable``), so a
link-type switch knows where the port's other protocol goes.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass

from ..errors import VerbsError
from .resprofile import PF_HEAVY, PROFILE_NAMES


@dataclass(frozen=True)
class Param:
    name: str
    default: int
    names: tuple = ()           # ((value, "Name"), ...): shown as Name(value); empty: a number
    max: int = 1
    supported: tuple = ()       # the values this device can apply (empty: every valid one)

    def show(self, v: int) -> str:
        """mlxconfig's form: ``True(1)``, ``ETH(2)``, or the number."""
        for value, n in self.names:
            if value == v:
                return f"{n}({v})"
        return str(v)

    def parse(self, text: str) -> int:
        """A value as mlxconfig takes it: the number, the name, or
        ``Name(n)``; ValueError with mlxconfig's kind of message."""
        t = str(text).strip()
        for value, n in self.names:
            if t.lower() in (n.lower(), f"{n.lower()}({value})"):
                return value
        try:
            v = int(t, 0)
        except ValueError:
            raise ValueError(f"Bad value {t!r} for {self.name}") from None
        if self.names and v not in dict(self.names):
            raise ValueError(f"Bad value {t!r} for {self.name}")
        if not 0 <= v <= self.max:
            raise ValueError(f"{self.name} value {v} is out of range (0..{self.max})")
        return v


BOOL = ((0, "False"), (1, "True"))
LINK_TYPES = ((1, "IB"), (2, "ETH"), (3, "VPI"))
IB, ETH = 1, 2
#: PF_TOTAL_SF's upper bound
MAX_SFS = 255


def params(max_vfs: int = 127) -> dict[str, Param]:
    """The parameters of a card whose NUM_OF_VFS may reach ``max_vfs``, in
    mlxconfig's query order."""
    return {p.name: p for p in (
        Param("NUM_OF_VFS", 0, max=max_vfs),
        Param("SRIOV_EN", 0, BOOL),
        Param("LINK_TYPE_P1", ETH, LINK_TYPES, 3, (IB, ETH)),
        Param("LINK_TYPE_P2", ETH, LINK_TYPES, 3, (IB, ETH)),
        Param("PF_TOTAL_SF", 0, max=MAX_SFS),
        Param("RDMA_RESOURCE_PROFILE", PF_HEAVY, PROFILE_NAMES),
    )}


class NvStore:
    """One device's NV configuration, persisted in ``path``."""

    def __init__(self, path: str, max_vfs: int = 127):
        self.path = path
        self.params = params(max_vfs)
        self.next: dict[str, int] = {}
        self.current: dict[str, int] = {}
        self.cables: dict[str, dict] = {}       # port number (str) -> {"eth": {...}, "ib": {...}}
        try:
            with open(path) as f:
                data = json.load(f)
            self.next = {k: int(v) for k, v in data.get("next", {}).items() if k in self.params}
            self.current = {k: int(v) for k, v in data.get("current", {}).items() if k in self.params}
            self.cables = {str(k): dict(v) for k, v in data.get("cables", {}).items()}
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError, AttributeError) as e:
            raise VerbsError(errno.EIO, f"{path}: unreadable NV configuration ({e})") from None

    def default(self, name: str) -> int:
        return self.params[name].default

    def get_current(self, name: str) -> int:
        return self.current.get(name, self.default(name))

    def get_next(self, name: str) -> int:
        return self.next.get(name, self.default(name))

    def rows(self, names=None) -> list[dict]:
        """Per parameter: name, default, current, next (ints) and their
        mlxconfig forms."""
        out = []
        for n in names or self.params:
            p = self.params[n]
            d, c, x = p.default, self.get_current(n), self.get_next(n)
            out.append({"name": n, "default": d, "current": c, "next": x,
                        "default_text": p.show(d), "current_text": p.show(c), "next_text": p.show(x)})
        return out

    def check(self, changes: dict) -> dict[str, int]:
        """``{NAME: text}`` parsed; EINVAL names the first bad one."""
        out = {}
        for name, text in changes.items():
            p = self.params.get(name)
            if p is None:
                raise VerbsError(errno.EINVAL, f"The Device doesn't support {name} parameter")
            try:
                out[name] = p.parse(text)
            except ValueError as e:
                raise VerbsError(errno.EINVAL, str(e)) from None
            if p.supported and out[name] not in p.supported:
                raise VerbsError(errno.EOPNOTSUPP, f"{name}={p.show(out[name])} is not supported: a softrdma"
                                                   f" port is IB(1) or ETH(2), it does not sense its link")
        return out

    def set(self, values: dict[str, int]) -> None:
        """Store next-boot values (already checked)."""
        for n, v in values.items():
            self.next[n] = v
        self._save()

    def reset(self) -> None:
        """Every next-boot value back to its default."""
        self.next = {}
        self._save()

    def boot(self) -> bool:
        """A firmware boot: the next-boot values become current.  Returns
        whether anything changed."""
        new = {n: self.get_next(n) for n in self.params}
        changed = any(new[n] != self.get_current(n) for n in self.params)
        self.current = dict(new)
        self._save()
        return changed

    def force(self, name: str, value: int, next_too: bool = True) -> None:
        """The port came up as ``value`` by an explicit attach (``rdma link
        add``): current and next-boot values both say so (``next_too``
        False: only the current one -- a boot that could not apply it)."""
        self.current[name] = value
        if next_too:
            self.next[name] = value
        self._save()

    def cable(self, port: int, kind: str) -> dict | None:
        """Where ``port`` is plugged in for ``kind`` ("eth" or "ib")."""
        c = self.cables.get(str(port), {}).get(kind)
        return dict(c) if c else None

    def set_cable(self, port: int, kind: str, where: dict) -> None:
        if self.cables.get(str(port), {}).get(kind) == where:
            return
        self.cables.setdefault(str(port), {})[kind] = dict(where)
        self._save()

    def _save(self) -> None:
        def keep(values):
            return {n: v for n, v in values.items() if v != self.default(n)}
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"next": keep(self.next), "current": keep(self.current), "cables": self.cables}, f,
                      sort_keys=True)
        os.replace(tmp, self.path)


__all__ = ["ETH", "IB", "NvStore", "Param", "params"]
