"""The MAD transport of the diags: what libibmad's ``mad_rpc`` over
umad2sim does, as an ibsim client (``softrdma.sm.umad.IbsimPort`` with
issm off, not modified: this module only adds the requests it lacks).

Owns: the own port's LID/port/SM LID (ibsim's GET_PORTINFO, as umad2sim's
fake sysfs), ``PortId`` (a LID, a directed route, or both: DrSLID routing),
one request/response exchange with timeout and retries (``rpc``), and a
pipelined batch (``rpc_many``) that still hands answers back in request
order.  TIDs: the low 32 bits are ours, ibsim owns the upper ones.
"""

from __future__ import annotations

import itertools
import os
import select
import sys
import time

from ...sm.umad import IbsimPort, TransportError
from ...wire import ibsim, smp
from ...wire.errors import WireError

METHOD_GET = 0x01
METHOD_SET = 0x02
DEFAULT_TIMEOUT_MS = 1000       # libibmad MAD_DEF_TIMEOUT_MS
DEFAULT_RETRIES = 3             # libibmad MAD_DEF_RETRIES
_tids = itertools.count((os.getpid() & 0xFFFF) << 16 | 1)


class PortId:
    """libibmad's ib_portid_t: ``lid`` (0: none) and a directed route
    ``path`` (output ports after the first node, None: LID-routed); with
    both, the path starts at the node with that LID (DrSLID = own LID)."""

    __slots__ = ("lid", "path", "drslid")

    def __init__(self, lid: int = 0, path=None, drslid: int = 0xFFFF):
        self.lid = lid
        self.path = tuple(path) if path is not None else None
        self.drslid = drslid

    def extend(self, port: int, self_lid: int) -> "PortId":
        return PortId(self.lid, (self.path or ()) + (port,),
                      self_lid if self.lid else 0xFFFF)

    def __str__(self):
        """portid2str()"""
        if self.path is not None and (self.lid == 0 or self.path):
            p = ",".join(str(x) for x in (0,) + self.path)
            slid = self.drslid if self.lid else 0xFFFF
            head = f"Lid {self.lid} " if self.lid else ""
            return f"{head}DR path slid {slid}; dlid 65535; {p}"
        return f"Lid {self.lid}"


class MadPort:
    def __init__(self, timeout_ms: int | None = None, retries: int = DEFAULT_RETRIES,
                 issm: bool = False, set_issm: bool = False):
        """``issm``: attach as ibsim's "SM" client, the one that gets the
        unsolicited QP0/QP1 requests for the node (a server such as
        ``ibping -S``); ``set_issm``: also set IsSM in the CapabilityMask."""
        self.timeout = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000.0
        self.retries = retries
        self.port = IbsimPort(issm=issm, set_issm=set_issm)
        try:
            pi = smp.PORT_INFO.decode(self.port.control(ibsim.SimCtlType.GET_PORTINFO, bytes(64)).data)
            ni = smp.NODE_INFO.decode(self.port.control(ibsim.SimCtlType.GET_NODEINFO, bytes(64)).data)
        except (TransportError, WireError):
            self.port.close()
            raise
        self.lid = pi["Lid"]
        self.sm_lid = pi["SMLid"]
        self.portnum = pi["LocalPort"]
        self.port_info = pi
        self.node_info = ni
        self.last_status = 0

    def close(self):
        self.port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- building ---------------------------------------------------------------
    def smp_request(self, portid: PortId, attr: int, mod: int = 0, data=b"",
                    method: int = METHOD_GET):
        tid = next(_tids) & 0xFFFFFFFF
        if portid.path is not None and (portid.lid == 0 or portid.path):
            drslid = portid.drslid if portid.lid else 0xFFFF
            mad = smp.build_dr_smp(method, attr, portid.path, mod, data, tid=tid, dr_slid=drslid)
            dlid = portid.lid if portid.lid else 0xFFFF
            slid = 0 if portid.lid else 0xFFFF
        else:
            mad = smp.build_smp(method, attr, mod, data, tid=tid)
            dlid, slid = portid.lid, 0
        return tid, ibsim.build_request(dlid, slid, 0, 0, mad)

    def perf_request(self, lid: int, attr: int, mod: int = 0, data=b"", method: int = METHOD_GET):
        tid = next(_tids) & 0xFFFFFFFF
        mad = smp.build_perf(method, attr, mod, data, tid=tid)
        return tid, ibsim.build_request(lid, 0, 1, 1, mad)

    # --- exchanging ---------------------------------------------------------------
    def rpc_many(self, reqs, window: int = 16) -> list:
        """Send (tid, datagram) pairs, up to ``window`` in flight; return each
        answer MAD (bytes) or None (timed out / dropped / bad status), in order."""
        reqs = list(reqs)
        out: list = [None] * len(reqs)
        index = {tid: i for i, (tid, _) in enumerate(reqs)}
        tries = [0] * len(reqs)
        pending: dict[int, float] = {}
        nxt = 0
        done = 0
        sock = self.port.data
        while done < len(reqs):
            while nxt < len(reqs) and len(pending) < window:
                self._send(reqs[nxt][1])
                pending[nxt] = time.monotonic()
                nxt += 1
            wait = min(pending.values()) + self.timeout - time.monotonic() if pending else 0
            r, _, _ = select.select([sock], [], [], max(0.0, wait))
            if r:
                for req in self.port.recv_all():
                    status, mad = req.status, req.mad
                    tid = int.from_bytes(mad[8:16], "big") & 0xFFFFFFFF
                    i = index.get(tid)
                    # a response, or the request itself back with an error status
                    # (ibsim could not deliver it: ETIMEDOUT at once, no timer needed)
                    if i is None or i not in pending or not (mad[3] & 0x80 or status):
                        continue
                    del pending[i]
                    done += 1
                    self.last_status = status or int.from_bytes(mad[4:6], "big") & 0x7FFF
                    if status == 0:
                        out[i] = bytes(mad)
            now = time.monotonic()
            for i, t0 in list(pending.items()):
                if now - t0 >= self.timeout:
                    tries[i] += 1
                    if tries[i] > self.retries:
                        del pending[i]
                        done += 1
                    else:
                        self._send(reqs[i][1])
                        pending[i] = now
        return out

    def _send(self, dgram):
        try:
            self.port.data.send(dgram)
        except BlockingIOError:
            select.select([], [self.port.data], [], self.timeout)
            self.port.data.send(dgram)

    def smp_query(self, portid: PortId, attr: int, mod: int = 0, data=b"",
                  method: int = METHOD_GET) -> bytes | None:
        """smp_query_via(): the 64 data bytes, or None (and ``last_status``)."""
        mad = self.rpc_many([self.smp_request(portid, attr, mod, data, method)])[0]
        if mad is None:
            ibwarn("mad_rpc", f"_do_madrpc failed; dport ({portid})")
            return None
        st = int.from_bytes(mad[4:6], "big") & (0x7FFF if mad[1] == 0x81 else 0xFFFF)
        self.last_status = st
        if st:
            return None
        return mad[64:128]

    def perf_query(self, lid: int, attr: int, mod: int = 0, data=b"",
                   method: int = METHOD_GET) -> bytes | None:
        mad = self.rpc_many([self.perf_request(lid, attr, mod, data, method)])[0]
        if mad is None:
            ibwarn("mad_rpc", f"_do_madrpc failed; dport (Lid {lid})")
            return None
        self.last_status = int.from_bytes(mad[4:6], "big")
        if self.last_status:
            return None
        return mad[64:256]


SA_CLASS = 0x03
SA_ATTR_PATH_RECORD = 0x0035
PR_COMPMASK_DGID, PR_COMPMASK_SGID = 1 << 2, 1 << 3
SA_DATA_OFFSET = 56
GID_PREFIX = 0xFE80000000000000


def sa_path_lid(port: MadPort, guid: int) -> int | None:
    """ib_path_query_via(): the DLID of a PathRecord from the own port to
    the port ``guid``, from the SA at the SM LID; None (with libibmad's
    warnings) when no SA answers -- ibsim has none without a resident SM."""
    tid = next(_tids) & 0xFFFFFFFF
    mad = bytearray(256)
    mad[0:4] = bytes([1, SA_CLASS, 2, METHOD_GET])
    mad[8:16] = tid.to_bytes(8, "big")
    mad[16:18] = SA_ATTR_PATH_RECORD.to_bytes(2, "big")
    mad[48:56] = (PR_COMPMASK_DGID | PR_COMPMASK_SGID).to_bytes(8, "big")
    rec = SA_DATA_OFFSET
    mad[rec + 8:rec + 24] = GID_PREFIX.to_bytes(8, "big") + guid.to_bytes(8, "big")
    # the SGID is the own port's GID 0 as umad2sim's sysfs has it: NodeGUID + LocalPortNum
    # (real ibsim's GET_NODEINFO PortGUID of a CA is the NodeGUID: the SA would refuse that)
    sgid_guid = (port.node_info["Guid"] + port.portnum) & 0xFFFFFFFFFFFFFFFF
    mad[rec + 24:rec + 40] = GID_PREFIX.to_bytes(8, "big") + sgid_guid.to_bytes(8, "big")
    ans = port.rpc_many([(tid, ibsim.build_request(port.sm_lid, 0, 1, 1, bytes(mad)))])[0]
    if ans is None:
        ibwarn("mad_rpc_rmpp", f"_do_madrpc failed; dport (Lid {port.sm_lid})")
        ibwarn("ib_path_query_via", "sa call path_query failed")
        return None
    if int.from_bytes(ans[4:6], "big"):
        ibwarn("ib_path_query_via", "sa call path_query failed")
        return None
    return int.from_bytes(ans[rec + 40:rec + 42], "big") or None


def ibwarn(func: str, msg: str) -> None:
    """IBWARN(): ``ibwarn: [pid] func: msg`` on stderr."""
    sys.stdout.flush()
    sys.stderr.write(f"ibwarn: [{os.getpid()}] {func}: {msg}\n")


def xdump(msg: str, data) -> str:
    """libibmad xdump(): 16 bytes a line as 8 groups of 4 hex digits."""
    out = msg
    for i in range(0, len(data), 16):
        row = bytes(data[i:i + 16])
        out += " ".join(row[j:j + 2].hex() for j in range(0, len(row), 2)) + "\n"
    return out
