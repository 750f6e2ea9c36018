"""The MAD transport of the diags: what libibmad's ``mad_rpc`` over
umad2sim does, as an ibsim client (``softrdma.mgmt.umad.IbsimPort`` with
issm off) whose requests a ``softrdma.mgmt.agent.MadAgent`` tracks.

Owns: the own port's LID/port/SM LID (ibsim's GET_PORTINFO, as umad2sim's
fake sysfs; or a softrdma IB device's port, ``devport``), ``PortId`` (a LID, a directed route, or both: DrSLID routing),
the socket loop that runs the agent (``run``), one request/response
exchange (``smp_query``, ``perf_query``) and a pipelined batch
(``rpc_many``) that still hands answers back in request order.  TIDs: the
agent's, from the pid as libibmad's; the low 32 bits are ours, ibsim owns
the upper ones.  A request is ``(dest, mad)`` with ``dest`` = (DLID, DQP, SQP).
"""

from __future__ import annotations

import os
import sys
import time

from ...mgmt.agent import MadAgent, MadSend
from ...mgmt.umad import IbsimPort, TransportError
from ...wire import ibsim, smp
from ...wire.errors import WireError

METHOD_GET = 0x01
METHOD_SET = 0x02
DEFAULT_TIMEOUT_MS = 1000       # libibmad MAD_DEF_TIMEOUT_MS
DEFAULT_RETRIES = 3             # libibmad MAD_DEF_RETRIES
GSI_QP = 1
# the process's TIDs (libibmad: one counter from the pid): a port opened after
# another one goes on where it stopped, so no late answer matches a new request
_next_tid = (os.getpid() & 0xFFFF) << 16 | 1


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
                 issm: bool = False, set_issm: bool = False, device: str | None = None, ca_port: int = 0,
                 classes=()):
        """``issm``: attach as ibsim's "SM" client, the one that gets the
        unsolicited QP0/QP1 requests for the node (a server such as
        ``ibping -S``); ``set_issm``: also set IsSM in the CapabilityMask.
        ``device``: a softrdma IB device instead of ibsim (``devport``), its
        umad file taking the requests of management ``classes``."""
        self.timeout = (timeout_ms or DEFAULT_TIMEOUT_MS) / 1000.0
        self.retries = retries
        self.device = device
        if device is not None:
            from .devport import DevicePort
            self.port = DevicePort(device, ca_port, classes)
        else:
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
        self.agent = MadAgent(timeout=self.timeout, retries=retries, first_tid=_next_tid)

    def close(self):
        global _next_tid
        _next_tid = self.agent.next_tid
        self.port.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # --- building ---------------------------------------------------------------
    def smp_request(self, portid: PortId, attr: int, mod: int = 0, data=b"",
                    method: int = METHOD_GET):
        tid = self.agent.alloc_tid()
        if portid.path is not None and (portid.lid == 0 or portid.path):
            drslid = portid.drslid if portid.lid else 0xFFFF
            mad = smp.build_dr_smp(method, attr, portid.path, mod, data, tid=tid, dr_slid=drslid)
            dlid = portid.lid if portid.lid else 0xFFFF      # SLID: permissive with it, else 0
        else:
            mad = smp.build_smp(method, attr, mod, data, tid=tid)
            dlid = portid.lid
        return (dlid, 0, 0), mad

    def perf_request(self, lid: int, attr: int, mod: int = 0, data=b"", method: int = METHOD_GET):
        mad = smp.build_perf(method, attr, mod, data, tid=self.agent.alloc_tid())
        return (lid, GSI_QP, GSI_QP), mad

    # --- exchanging ---------------------------------------------------------------
    def post(self, dest, mad, callback=None, *, timeout: float | None = None, retries: int | None = None,
             rmpp: bool = False) -> MadSend:
        """Queue one request (its TID already in ``mad``) for ``run``."""
        return self.agent.post_send(bytearray(mad), callback, dest=dest, own_tid=True,
                                    timeout=timeout, retries=retries, rmpp=rmpp)

    def _answered(self, mad) -> None:
        if mad is not None:
            self.last_status = int.from_bytes(mad[4:6], "big") & 0x7FFF

    def run(self) -> None:
        """The socket loop: send what the agent has, hand it what arrives
        (a request back with an error status -- ibsim could not deliver it:
        ETIMEDOUT at once, no timer needed -- fails it), until nothing is
        outstanding.  Requests to us (not responses) are dropped."""
        agent, port = self.agent, self.port
        while not agent.idle:
            for (dlid, dqp, sqp), mad in agent.take(time.monotonic()):
                port.send(mad, dlid, dqp, sqp, block=self.timeout)
            if agent.idle:
                break
            d = agent.deadline
            if port.wait(0.0 if d is None else d - time.monotonic()):
                now = time.monotonic()
                for req in port.recv_all():
                    if req.status:
                        if agent.fail(req.mad, req.status):
                            self.last_status = req.status
                    else:
                        # what needs an address back (an RMPP ACK) is a GSI MAD: QP1 to QP1
                        agent.deliver(req.mad, now, (req.slid, GSI_QP, GSI_QP) if req.slid else None,
                                      req.length)
            agent.tick(time.monotonic())

    def rpc_many(self, reqs, window: int = 16) -> list:
        """Send (dest, mad) pairs, up to ``window`` in flight; return each
        answer MAD (bytes) or None (timed out / dropped / bad status), in order."""
        self.agent.window = window
        sends = [self.post(dest, mad, self._answered) for dest, mad in reqs]
        self.run()
        return [s.response for s in sends]

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
    mad = bytearray(256)
    mad[0:4] = bytes([1, SA_CLASS, 2, METHOD_GET])
    mad[8:16] = port.agent.alloc_tid().to_bytes(8, "big")
    mad[16:18] = SA_ATTR_PATH_RECORD.to_bytes(2, "big")
    mad[48:56] = (PR_COMPMASK_DGID | PR_COMPMASK_SGID).to_bytes(8, "big")
    rec = SA_DATA_OFFSET
    mad[rec + 8:rec + 24] = GID_PREFIX.to_bytes(8, "big") + guid.to_bytes(8, "big")
    # the SGID is the own port's GID 0 as umad2sim's sysfs has it: NodeGUID + LocalPortNum
    # (real ibsim's GET_NODEINFO PortGUID of a CA is the NodeGUID: the SA would refuse that)
    sgid_guid = (port.node_info["Guid"] + port.portnum) & 0xFFFFFFFFFFFFFFFF
    if port.device is not None:              # a device's GID 0: the subnet prefix and its port GUID
        sgid_guid = port.node_info["PortGuid"]
    mad[rec + 24:rec + 40] = GID_PREFIX.to_bytes(8, "big") + sgid_guid.to_bytes(8, "big")
    ans = port.rpc_many([((port.sm_lid, GSI_QP, GSI_QP), mad)])[0]
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
