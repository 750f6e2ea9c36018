"""Checking the fields of a control request before anything uses them
(the kinds ``uapi.commands`` declares fields with, and the daemon's
handlers' own reads).

A request is JSON from a process the daemon does not trust: any field may
be missing, of another type, or a number no C field could hold.  The verbs
ABI has fixed-width unsigned fields (a value that does not fit cannot even
be written there), so each helper takes the field's width and refuses
anything else with EINVAL before the daemon's state is touched -- a value
that reached a transport object unchecked could fail much later, in the
data path, where no request is there to fail instead.
"""

from __future__ import annotations

import errno

from ..errors import VerbsError
from ..uapi.qp_attr import QP_ATTR, QP_CAP  # ibv_qp_attr / ibv_qp_cap field widths, for fields()

U8, U16, U32, U64 = 0xFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
#: a field's default when it has none: the field is required
REQUIRED = object()


def bad(msg: str) -> VerbsError:
    return VerbsError(errno.EINVAL, msg)


def _show(v) -> str:
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def uint(m: dict, key: str, limit: int = U32, default=REQUIRED, *, lo: int = 0) -> int:
    """``m[key]`` as an integer in [lo, limit] (a JSON boolean counts as 0/1)."""
    if key not in m or (m[key] is None and default is not REQUIRED):
        if default is REQUIRED:
            raise bad(f"missing field {key!r}")
        return default
    v = m[key]
    if type(v) is bool:
        v = int(v)
    if type(v) is not int or not lo <= v <= limit:
        raise bad(f"{key}: expected an integer in [{lo}, {limit:#x}], got {_show(v)}")
    return v


def handle(m: dict, key: str, optional: bool = False) -> int | None:
    """An object handle (0 or absent: none, when ``optional``)."""
    if optional and not m.get(key):
        return None
    return uint(m, key, U32)


def string(m: dict, key: str, max_len: int = 64, default=REQUIRED) -> str:
    if key not in m:
        if default is REQUIRED:
            raise bad(f"missing field {key!r}")
        return default
    v = m[key]
    if not isinstance(v, str) or len(v) > max_len:
        raise bad(f"{key}: expected a string of at most {max_len} characters, got {_show(v)}")
    return v


def obj(m: dict, key: str, default=REQUIRED) -> dict:
    if key not in m or m[key] is None:
        if default is REQUIRED:
            raise bad(f"missing field {key!r}")
        return default
    v = m[key]
    if not isinstance(v, dict):
        raise bad(f"{key}: expected an object, got {_show(v)}")
    return v


def fields(d: dict, widths: dict, what: str) -> dict:
    """Every key of ``d`` named in ``widths`` (key -> the C field's max
    value), checked; any other key is EINVAL."""
    for k in d:
        if k not in widths:
            raise bad(f"{what} has no field {k!r}")
    return {k: uint(d, k, widths[k]) for k in d}


# ibv_ah_attr with its ibv_global_route (dgid apart)
AH_ATTR = {"sgid_index": U8, "flow_label": U32, "hop_limit": U8, "traffic_class": U8, "sl": U8, "dlid": U16,
           "port_num": U8, "is_global": U8, "src_path_bits": U8, "static_rate": U8}


def ah_attr(d) -> dict:
    """The address vector fields of a request, checked (dgid: 16 bytes in hex)."""
    if not isinstance(d, dict):
        raise bad(f"ah_attr: expected an object, got {_show(d)}")
    rest = {k: v for k, v in d.items() if k != "dgid"}
    out = fields(rest, AH_ATTR, "ah_attr")
    if "dgid" in d:
        g = d["dgid"]
        try:
            raw = bytes.fromhex(g) if isinstance(g, str) and len(g) == 32 else None
        except ValueError:
            raw = None
        if raw is None:
            raise bad(f"ah_attr.dgid: expected 16 bytes in hex, got {_show(g)}")
        out["dgid"] = raw
    return out


__all__ = ["REQUIRED", "uint", "handle", "string", "obj", "fields", "ah_attr", "bad", "QP_CAP", "QP_ATTR", "AH_ATTR",
           "U8", "U16", "U32", "U64"]
