"""SR-IOV virtual functions of an InfiniBand PF: devices that share the
PF's port on the fabric.  Without virtualization in the SM (the opensm of
the distributions has none) each VF's port GUID is an *alias GUID* of the
PF's port; with it (``virt_enabled 2``, ``sm.virt``) each VF is a virtual
port with a LID of its own.

* ``IbVf`` is a VF's device.  Its port is the PF's, seen through the VF's
  own GUIDs (``sriov/N/node``, ``sriov/N/port``; 0 until set, as mlx5's):
  the PF's PortInfo with the VF's node and port GUID, its LID and SM LID
  the PF's, its state the PF's (policy Follow or Up) or Down (policy
  Down).  GID 0 is the subnet prefix + the VF's port GUID -- a VF's
  traffic goes with a GRH, from that GID, from the PF's LID, through the
  PF's fabric connection (``VfLink``).
* ``Vports`` is the PF's side: a PACKETS message from the fabric whose
  packets carry a GRH to a VF's GID goes to that VF (the rest to the PF,
  as before), so does a LID-routed MAD answering a VF's request (its
  TID); a multicast packet (a multicast DLID) goes to the PF and to
  every VF whose port is up -- each function's QPs attached to the group
  get it, as the HCA replicates a multicast packet to every function (a
  VF's own send is not looped back to the PF or the other VFs: the fabric
  does not return a packet to the port it came in, and the functions'
  loopback is not modelled); a change of the PF's PortInfo is each VF's too.  The VFs'
  port GUIDs are registered with the subnet's SA as alias GUIDs of the
  PF's port -- GUIDInfoRecord Set, block 0, index VF + 1, as the IB
  driver's alias GUID service does -- so PathRecords to a VF's GID
  resolve to the PF's LID; sent again whenever the PF's LID, its SM or
  the GUIDs change.
* Virtual ports: the PF tells its port's SMA (local SMPs, hop count 0,
  as an HCA's firmware does) how many vports it has
  (VirtualizationInfo.VPortIndexTop) and each VF's GUID with LIDRequired
  (VPortInfo), and reads them back each second.  Once the SM enabled
  virtualization and gave a vport a LID and a state, the VF's port has
  that LID and state; packets to that LID go to the VF.
"""

from __future__ import annotations

import errno
import itertools

from ..errors import VerbsError
from ..wire import fabriclink as fl
from ..wire import smp
from ..wire.lrh import GRH_BYTES, LRH_BYTES, MCAST_LID_BASE, PERMISSIVE_LID
from ..wire.mad import MgmtClass, build_mad
from ..wire.sa import SA_CLASS_VERSION, SA_HDR, SaAttr
from ..wire.smp import build_dr_smp
from ..wire.smp_virt import (VIRTUALIZATION_INFO, VIRTUALIZATION_INFO_ATTR, VPORT_INFO, VPORT_INFO_ATTR)
from .ib import ACTIVE, DOWN, IbDevice

LNH_GRH = 3                       # LRH.LNH: IBA global (a GRH follows the LRH)
VL15 = 15
SMP_GET, SMP_SET, SMP_GET_RESP = 0x01, 0x02, 0x81
SMP_AT = LRH_BYTES + 12 + 8       # a QP0 packet's MAD: after the LRH, BTH and DETH
_smp_tids = itertools.count(0x5F1E000000)
DISABLED = 3                      # PortPhysicalState: Disabled (a VF held Down)
METHOD_SET = 0x02
#: GUIDInfoRecord: LID, BlockNum, reserved, reserved, GUIDInfo (IBA 15.2.5.18)
GUIDINFO_RECORD_SIZE = 72
GIR_COMP_LID, GIR_COMP_BLOCKNUM = 1 << 0, 1 << 1
GIR_COMP_GID0 = 1 << 4            # GID0 .. GID7: bits 4 .. 11
_tids = itertools.count(0x5F1D0000)


def parse_guid(text) -> int:
    """A GUID as ``sriov/N/node`` and ``port`` take it: eight hex octets
    separated by colons; EINVAL otherwise (the kernel's sscanf fails)."""
    parts = str(text).strip().split(":")
    if len(parts) != 8 or not all(1 <= len(p) <= 2 for p in parts):
        raise VerbsError(errno.EINVAL, f"bad GUID {str(text).strip()!r}: expected xx:xx:xx:xx:xx:xx:xx:xx")
    try:
        return int.from_bytes(bytes(int(p, 16) for p in parts), "big")
    except ValueError:
        raise VerbsError(errno.EINVAL, f"bad GUID {str(text).strip()!r}") from None


def guid_colons(guid: int) -> str:
    return ":".join(f"{b:02x}" for b in guid.to_bytes(8, "big"))


def guidinfo_set(lid: int, guids: dict[int, int]) -> bytes:
    """The SA MAD that sets ``guids`` ({index: GUID}, indices 1..7 of
    block 0) as alias GUIDs of the port at ``lid``."""
    table = [0] * smp.GUIDS_PER_BLOCK
    mask = GIR_COMP_LID | GIR_COMP_BLOCKNUM
    for i, g in guids.items():
        table[i] = g
        mask |= GIR_COMP_GID0 << i
    rec = lid.to_bytes(2, "big") + bytes(6) + smp.encode_guid_info(table)
    sa_hdr = SA_HDR.pack(0, 0, 0, 0, 0, 0, 0, (GUIDINFO_RECORD_SIZE + 7) // 8, 0, mask)
    return build_mad(MgmtClass.SUBN_ADM, SA_CLASS_VERSION, METHOD_SET, SaAttr.GUIDINFO_RECORD, sa_hdr + rec,
                     tid=next(_tids))


class VfLink:
    """A VF's fabric link: the PF's connection (it sends through it; the
    daemon reads it for the PF)."""

    sock = None
    retry_at = None
    error = None
    outbox = ()

    def __init__(self, pf_link):
        self.pf = pf_link
        self.base, self.node, self.port_num = pf_link.base, pf_link.node, pf_link.port_num

    @property
    def connected(self) -> bool:
        return self.pf.connected

    def send_messages(self, msgs: list) -> int:
        return self.pf.send_messages(msgs)

    def send_packets(self, frames: list) -> int:
        return self.pf.send_packets(frames)

    def send_control(self, msg: bytes) -> None:
        pass                            # a VF's CapabilityMask bits are not the port's

    def close(self, now=None) -> None:
        pass

    def receive(self):
        return [], False


class IbVf(IbDevice):
    """A VF of the IB PF ``pf`` (see the module docstring)."""

    def __init__(self, name: str, pf: IbDevice, vf):
        super().__init__(name, pf.fabric, pf.node_sel, port_num=pf.link.port_num)
        self.link = VfLink(pf.link)
        self.pf_dev = pf
        self.vf = vf                    # device.sriov.Vf: GUIDs and policy
        self.vport = None               # its VPortInfo as the port's SMA last answered (virtualization)
        self.follow()

    def follow(self) -> None:
        """The PF's port as this VF sees it (its events queued)."""
        raw = self.pf_dev.raw_info
        if raw is None:
            return
        ni = smp.NODE_INFO.decode(raw.node_info)
        ni.update(Guid=self.vf.node_guid, PortGuid=self.vf.port_guid)
        pi = smp.PORT_INFO.decode(raw.port_info)
        vp = self.vport
        if vp is not None and vp["Lid"]:        # a virtual port with a LID of its own (the SM's)
            pi.update(Lid=vp["Lid"], LMC=0, LinkState=vp["VPortState"] or DOWN)
        if self.vf.policy == "Down":
            pi.update(LinkState=DOWN, PhysLinkState=DISABLED)
        gi = smp.encode_guid_info([self.vf.port_guid] + [0] * (smp.GUIDS_PER_BLOCK - 1))
        msg = fl.PortInfoMsg(bytes(smp.NODE_INFO.encode(**ni)), bytes(smp.PORT_INFO.encode(**pi)), gi,
                             raw.pkeys)
        if msg != self.raw_info:
            self.apply(msg)

    def close(self) -> None:
        self.mcast.close()
        self.gsi.umad.close_all()


class Vports:
    """The PF's VFs on its port (``IbPort.vports``)."""

    def __init__(self, pf: IbDevice):
        self.pf = pf
        self.vfs: list[IbVf] = []
        self.by_gid: dict[bytes, IbVf] = {}
        self.by_lid: dict[int, IbVf] = {}
        self.sent = None                # what the SA was last told
        self.vinfo = None               # VirtualizationInfo as the port's SMA last answered
        self.configured = None          # what the SMA was last told of the vports
        self.tids: set[int] = set()

    def add(self, dev: IbVf) -> None:
        self.vfs.append(dev)
        self.changed()

    def remove(self, dev: IbVf) -> None:
        if dev in self.vfs:
            self.vfs.remove(dev)
        self.changed()

    def changed(self) -> None:
        """A VF's GUIDs or policy changed (or one came or went)."""
        for d in self.vfs:
            d.follow()
        self.by_gid = {d.gid(0): d for d in self.vfs if d.vf.port_guid and d.gid(0) is not None}
        self.by_lid = {d.lid: d for d in self.vfs if d.vport is not None and d.vport["Lid"] and
                       d.lid != self.pf.lid}
        self.register()
        self.configure()

    def port_changed(self) -> None:
        """The PF's PortInfo changed: the VFs' too."""
        self.changed()

    def register(self) -> None:
        """Tell the SA the VFs' port GUIDs (alias GUIDs of the PF's port)
        when they, the PF's LID or its SM changed since it was last told."""
        pf = self.pf
        guids = {d.vf.index + 1: d.vf.port_guid for d in self.vfs
                 if d.vf.port_guid and d.vf.index + 1 < smp.GUIDS_PER_BLOCK}
        key = (pf.lid, pf.sm_lid, tuple(sorted(guids.items())))
        if pf.state != ACTIVE or not pf.sm_lid or not guids or key == self.sent:
            return
        self.sent = key
        pf.gsi.send_lid(guidinfo_set(pf.lid, guids), pf.sm_lid, sl=pf.sm_sl)

    # -- the port's vports (virtualization): the firmware's side, through the port's own SMA
    def _smp(self, method: int, attr: int, mod: int, data: bytes = b"") -> None:
        tid = next(_smp_tids)
        self.tids.add(tid)
        if len(self.tids) > 4096:
            self.tids.clear()
        self.pf.send_smp(bytes(build_dr_smp(method, attr, [], mod, data, tid=tid)), PERMISSIVE_LID)

    def configure(self) -> None:
        """Tell the port's SMA the vports (VirtualizationInfo: how many;
        VPortInfo: each VF's GUID, a LID required), keeping what the SM set
        there (virtualization enabled, the LIDs)."""
        pf = self.pf
        want = (len(self.vfs), tuple((d.vf.index, d.vf.port_guid) for d in self.vfs))
        if not pf.link.connected or want == self.configured:
            return
        self.configured = want
        vi = dict(self.vinfo or {"VPortCap": 127, "VirtualizationEnable": 0})
        vi.update(VPortIndexTop=len(self.vfs))
        self._smp(SMP_SET, VIRTUALIZATION_INFO_ATTR, 0, bytes(VIRTUALIZATION_INFO.encode(
            {k: v for k, v in vi.items() if k in ("VPortCap", "VPortIndexTop", "VirtualizationEnable")})))
        for d in self.vfs:
            vp = dict(d.vport or {})
            vp.update(PortGuid=d.vf.port_guid, LidRequired=1, LidByVPortIndex=0)
            self._smp(SMP_SET, VPORT_INFO_ATTR, d.vf.index + 1, bytes(VPORT_INFO.encode(
                {k: vp.get(k, 0) for k in ("PortGuid", "Lid", "LidByVPortIndex", "LidRequired")})))

    def poll(self) -> None:
        """Ask the port's SMA how the SM left the vports (each second)."""
        if self.vfs and self.pf.link.connected:
            if self.configured is None:
                self.configure()
            self._smp(SMP_GET, VIRTUALIZATION_INFO_ATTR, 0)
            for d in self.vfs:
                self._smp(SMP_GET, VPORT_INFO_ATTR, d.vf.index + 1)

    def _answer(self, mad) -> bool:
        """An answer of the port's SMA to one of our SMPs: taken in."""
        if len(mad) < 256 or mad[1] != MgmtClass.SUBN_DIRECTED_ROUTE or mad[3] != SMP_GET_RESP:
            return False
        tid = int.from_bytes(mad[8:16], "big")
        if tid not in self.tids:
            return False
        self.tids.discard(tid)
        if int.from_bytes(mad[4:6], "big") & 0x7FFF:    # a status (bit 15: the D bit of a DR answer)
            return True
        attr, mod = int.from_bytes(mad[16:18], "big"), int.from_bytes(mad[20:24], "big")
        data = bytes(mad[64:128])
        if attr == VIRTUALIZATION_INFO_ATTR:
            self.vinfo = VIRTUALIZATION_INFO.decode(data)
        elif attr == VPORT_INFO_ATTR:
            vp = VPORT_INFO.decode(data)
            for d in self.vfs:
                if d.vf.index + 1 == mod:
                    on = self.vinfo is not None and self.vinfo["VirtualizationEnable"]
                    new = vp if on else None
                    if new != d.vport:
                        d.vport = new
                        self.changed()
        return True

    def _mad_answer_owner(self, f) -> IbVf | None:
        """The VF whose request a LID-routed MAD answer to QP1 answers (an SA
        query of a VF's rdma_cm goes from the PF's LID without a GRH, and its
        answer comes back so): by the TID the VF's GSI waits for, the PF's
        own first."""
        if len(f) < SMP_AT + 24 or (f[LRH_BYTES + 5] << 16 | f[LRH_BYTES + 6] << 8 | f[LRH_BYTES + 7]) != 1:
            return None
        mad = f[SMP_AT:]
        if not mad[3] & 0x80:                           # a request: the PF's agents serve the port
            return None
        tid = int.from_bytes(mad[8:16], "big")
        if tid in self.pf.gsi.mad_agent.sends:
            return None
        for d in self.vfs:
            if tid in d.gsi.mad_agent.sends:
                return d
        return None

    def receive(self, msg, now: float) -> bool:
        """Hand a VF its packets from a PACKETS message (False: none was a
        VF's, the PF takes the message as it is); take the SMA's answers
        to our SMPs."""
        by_gid, by_lid = self.by_gid, self.by_lid
        if not self.vfs:
            return False
        try:
            frames = list(fl.iter_packets(msg))
        except Exception:               # noqa: BLE001 -- a bad message: the PF's path counts it
            return False
        mine: dict = {}
        rest = []
        taken = False
        for f in frames:
            dev = None
            if f[0] >> 4 == VL15:
                if len(f) >= SMP_AT + 256 and self._answer(f[SMP_AT:SMP_AT + 256]):
                    taken = True
                    continue
            elif MCAST_LID_BASE <= (dlid := f[2] << 8 | f[3]) < PERMISSIVE_LID:
                rest.append(f)                  # the PF's, and a copy for each VF up
                for d in self.vfs:
                    if d.state == ACTIVE:
                        mine.setdefault(d, []).append(f)
                continue
            elif by_lid:
                dev = by_lid.get(dlid)
            if dev is None and f[1] & 3 != LNH_GRH:
                dev = self._mad_answer_owner(f)
            if dev is None and len(f) >= LRH_BYTES + GRH_BYTES and f[1] & 3 == LNH_GRH:
                dev = by_gid.get(bytes(f[LRH_BYTES + 24:LRH_BYTES + 40]))
            if dev is None:
                rest.append(f)
            else:
                mine.setdefault(dev, []).append(f)
        if not mine and not taken:
            return False
        for dev, fs in mine.items():
            dev.pull_receives()
            dev.receive_frames(fs, now)
        if rest:
            self.pf.pull_receives()
            self.pf.receive_frames(rest, now)
        return True


__all__ = ["GUIDINFO_RECORD_SIZE", "IbVf", "VfLink", "Vports", "guid_colons", "guidinfo_set", "parse_guid"]
