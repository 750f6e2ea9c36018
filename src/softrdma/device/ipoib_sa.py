"""The SA queries of an IB port's IPoIB interfaces (the kernel's ib_sa
client as ipoib uses it): PathRecord Get per destination GID, and
MCMemberRecord Set (join) / Delete (leave), LID-routed from the port's
QP1 to the SM LID.

``SaClient`` sends through the GSI's own requests to a LID
(``Gsi.request_lid``: its MAD agent resends and gives up), with TIDs whose
upper half is ``HI_TID`` (below ``device.umad.FIRST_HI_TID``: the daemon's
own, never a umad file's, and apart from rdma_cm's).  Each request's
``done(status, record)`` runs once, with (0, the decoded record), (SA
status, None) or (None, None) after the retries.
"""

from __future__ import annotations

import time

from ..wire import mad as madw
from ..wire.sa import (MCMEMBER_RECORD, MCR_COMP, PATH_RECORD, PR_COMP_DGID, PR_COMP_NUMBPATH, PR_COMP_SGID,
                       SA_CLASS_VERSION, SA_DATA_OFFSET, SA_HDR, SA_HDR_OFFSET, SaAttr, SaMethod)

HI_TID = 0x49                      # 'I': the upper TID bits of IPoIB's SA requests (< FIRST_HI_TID)
PR_COMP_PKEY = 1 << 13
PR_COMP_REVERSIBLE = 1 << 11       # (IBA 15.2.5.16's component order: ServiceID is two bits)
TIMEOUT_MS, RETRIES = 500, 5
JOIN_FULL = 1


def _mad(method: int, attr: int, record: bytes, comp_mask: int) -> bytearray:
    m = madw.build_mad(madw.MgmtClass.SUBN_ADM, SA_CLASS_VERSION, method, attr)
    SA_HDR.pack_into(m, SA_HDR_OFFSET, 0, 0, 0, 0, 0, 0, 0, 0, 0, comp_mask)
    m[SA_DATA_OFFSET:SA_DATA_OFFSET + len(record)] = record
    return m


class SaClient:
    """One IB port's IPoIB SA requests (see the module docstring)."""

    def __init__(self, dev):
        self.dev = dev
        self._seq = 0
        self.queries = self.answers = self.failures = 0

    def _post(self, mad: bytearray, done, decode) -> int:
        self._seq = (self._seq + 1) & 0xFFFFFFFF or 1
        tid = (HI_TID << 32) | self._seq
        mad[8:16] = tid.to_bytes(8, "big")

        def finish(resp):
            if resp is None:
                self.failures += 1
                done(None, None)
                return
            self.answers += 1
            status = int.from_bytes(resp[4:6], "big")
            if status:
                done(status, None)
            else:
                done(0, decode(resp[SA_DATA_OFFSET:]))
        dev = self.dev
        dev.gsi.request_lid(bytes(mad), dev.sm_lid, finish, now=time.monotonic(), sl=dev.sm_sl,
                            timeout_ms=TIMEOUT_MS, retries=RETRIES)
        self.queries += 1
        return tid

    def path_record(self, sgid: bytes, dgid: bytes, pkey: int, done) -> int:
        """PathRecord Get SGID -> DGID in partition ``pkey`` (NumbPath 1, reversible)."""
        rec = PATH_RECORD.encode(SGID=int.from_bytes(sgid, "big"), DGID=int.from_bytes(dgid, "big"), PKey=pkey,
                                 NumbPath=1, Reversible=1)
        mask = PR_COMP_DGID | PR_COMP_SGID | PR_COMP_NUMBPATH | PR_COMP_PKEY | PR_COMP_REVERSIBLE
        return self._post(_mad(madw.Method.GET, SaAttr.PATH_RECORD, bytes(rec), mask), done, PATH_RECORD.decode)

    def join(self, mgid: bytes, port_gid: bytes, pkey: int, create: dict | None = None, done=None) -> int:
        """MCMemberRecord Set, full member; ``create``: the group's Q_Key,
        MTU, rate... (another group's, as ipoib creates an IP multicast
        group with its broadcast group's parameters)."""
        vals = {"MGID": int.from_bytes(mgid, "big"), "PortGID": int.from_bytes(port_gid, "big"),
                "JoinState": JOIN_FULL, "PKey": pkey}
        names = ["MGID", "PortGID", "JoinState", "PKey"]
        if create:
            for k in ("QKey", "TClass", "SL", "FlowLabel", "Mtu", "MtuSelector", "Rate", "RateSelector",
                      "PacketLifeTime", "PacketLifeTimeSelector", "HopLimit", "Scope"):
                if k in create:
                    vals[k] = create[k]
                    names.append(k)
        rec = bytes(MCMEMBER_RECORD.encode(**vals)).ljust(56, b"\0")
        mask = sum(MCR_COMP[k] for k in names)
        return self._post(_mad(madw.Method.SET, SaAttr.MCMEMBER_RECORD, rec, mask), done or _ignore,
                          MCMEMBER_RECORD.decode)

    def leave(self, mgid: bytes, port_gid: bytes) -> int:
        rec = bytes(MCMEMBER_RECORD.encode(MGID=int.from_bytes(mgid, "big"), PortGID=int.from_bytes(port_gid, "big"),
                                           JoinState=JOIN_FULL)).ljust(56, b"\0")
        mask = MCR_COMP["MGID"] | MCR_COMP["PortGID"] | MCR_COMP["JoinState"]
        return self._post(_mad(SaMethod.DELETE, SaAttr.MCMEMBER_RECORD, rec, mask), _ignore, MCMEMBER_RECORD.decode)

    def cancel(self, tid: int) -> None:
        self.dev.gsi.cancel(tid)


def _ignore(status, record) -> None:
    pass


__all__ = ["SaClient", "HI_TID"]
