"""A VF's VLAN tagging (``ip link set <pf> vf N vlan V [qos Q]``), as
mlx5's e-switch does it in VST mode: every frame the VF sends leaves
802.1Q-tagged with VID V and PCP Q, and only frames tagged V reach the VF
(untagged ones and other VIDs do not), the tag pushed and popped outside
the VF -- its netdev, addresses and GIDs do not change.

The e-switch is the kernel's: a VF's netdev is a macvlan (bridge mode) on
the PF's netdev (``device.fnnetdev``), and its VST port is two tc
programs on that macvlan's clsact qdisc (``tag``), loaded with bpf(2) --
they need neither the 8021q module nor act_vlan, only cls_bpf:

* egress: ``bpf_skb_vlan_push(802.1Q, Q << 13 | V)`` on every frame;
* ingress: a frame tagged 802.1Q with VID V is popped and taken, anything
  else dropped (TC_ACT_SHOT).

What the kernel cannot see is the daemon's own short cut between its
devices (``transport.port.Route.peer``): a port's ``eswitch_vlan`` (set
here: (the PF, V), None when untagged) must match its peer's for
a same-daemon delivery (``device.roce``).  And a VF's sockets are bound to
its netdev (SO_BINDTODEVICE, ``bind_sockets``, tagged or not): its packets
leave only through its own e-switch port, never through another VF's or a
route of the PF's (the VFs share the daemon's network namespace, where a
VM's VF would not), and it takes only what arrived on it.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import socket
import struct

from ..errors import VerbsError

log = logging.getLogger("softrdmad")

VLAN_MAX, QOS_MAX = 4095, 7
PROTOS = {"802.1q": 0x8100, "802.1ad": 0x88A8}

# bpf(2) and the classic tc constants a program needs
SYS_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine, 321)
BPF_PROG_LOAD, BPF_PROG_TYPE_SCHED_CLS = 5, 3
FUNC_SKB_VLAN_PUSH, FUNC_SKB_VLAN_POP = 18, 19
TC_ACT_OK, TC_ACT_SHOT = 0, 2
SKB_VLAN_PRESENT, SKB_VLAN_TCI, SKB_VLAN_PROTO = 20, 24, 28     # struct __sk_buff offsets
INGRESS, EGRESS = "ffff:fff2", "ffff:fff3"
ETH_P_8021Q_BE = socket.htons(0x8100)      # (a __be16 as the helper and __sk_buff.vlan_proto hold it)


def check(vlan, qos=0, proto="802.1Q") -> tuple[int, int]:
    """(vlan, qos) as mlx5 takes them: vlan 0..4095, qos 0..7 (EINVAL);
    802.1ad (VST QinQ) refused with EPROTONOSUPPORT, as mlx5e_set_vf_vlan."""
    try:
        v, q = int(str(vlan).strip(), 0), int(str(qos).strip(), 0)
    except ValueError:
        raise VerbsError(errno.EINVAL, f"bad vlan {vlan!r} or qos {qos!r}") from None
    p = PROTOS.get(str(proto).strip().lower())
    if p is None:
        raise VerbsError(errno.EINVAL, f"vlan protocol {proto!r}: 802.1Q or 802.1ad")
    if p != PROTOS["802.1q"]:
        raise VerbsError(errno.EPROTONOSUPPORT, "VF VLAN protocol 802.1ad (VST QinQ) is not supported")
    if not 0 <= v <= VLAN_MAX or not 0 <= q <= QOS_MAX:
        raise VerbsError(errno.EINVAL, f"vlan {v} qos {q}: vlan 0..{VLAN_MAX}, qos 0..{QOS_MAX}")
    return v, q


def parse_file(text: str) -> tuple[int, int]:
    """What a write to mlx5's ``sriov/N/vlan`` takes: ``Vlan:Qos[:Proto]``."""
    parts = str(text).strip().split(":")
    if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[:2]):
        raise VerbsError(errno.EINVAL, "expected <Vlan:Qos[:Proto]>")
    return check(parts[0], parts[1], parts[2] if len(parts) == 3 else "802.1Q")


# -- the two programs, as eBPF instructions (struct bpf_insn)

def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    return struct.pack("<BBhi", code, dst | src << 4, off, imm)


def _mov_imm(dst, imm): return _insn(0xB7, dst, imm=imm)        # BPF_ALU64 | BPF_MOV | BPF_K
def _mov_reg(dst, src): return _insn(0xBF, dst, src)            # BPF_ALU64 | BPF_MOV | BPF_X
def _ldx_w(dst, src, off): return _insn(0x61, dst, src, off)    # BPF_LDX | BPF_MEM | BPF_W
def _and_imm(dst, imm): return _insn(0x57, dst, imm=imm)        # BPF_ALU64 | BPF_AND | BPF_K
def _jne_imm(dst, imm, off): return _insn(0x55, dst, off=off, imm=imm)
def _jeq_imm(dst, imm, off): return _insn(0x15, dst, off=off, imm=imm)
def _call(func): return _insn(0x85, imm=func)
_EXIT = _insn(0x95)


def egress_program(vlan: int, qos: int) -> bytes:
    """Push the tag; a frame the helper cannot tag is dropped."""
    return b"".join((
        _mov_imm(2, ETH_P_8021Q_BE), _mov_imm(3, qos << 13 | vlan), _call(FUNC_SKB_VLAN_PUSH),
        _jne_imm(0, 0, 2), _mov_imm(0, TC_ACT_OK), _EXIT,
        _mov_imm(0, TC_ACT_SHOT), _EXIT))


def ingress_program(vlan: int) -> bytes:
    """Take an 802.1Q frame of VID ``vlan``, its tag popped; drop the rest."""
    return b"".join((
        _mov_reg(6, 1),
        _ldx_w(2, 1, SKB_VLAN_PRESENT), _jeq_imm(2, 0, 10),
        _ldx_w(2, 1, SKB_VLAN_PROTO), _jne_imm(2, ETH_P_8021Q_BE, 8),
        _ldx_w(2, 1, SKB_VLAN_TCI), _and_imm(2, 0xFFF), _jne_imm(2, vlan, 5),
        _mov_reg(1, 6), _call(FUNC_SKB_VLAN_POP), _jne_imm(0, 0, 2),
        _mov_imm(0, TC_ACT_OK), _EXIT,
        _mov_imm(0, TC_ACT_SHOT), _EXIT))


def _load(insns: bytes, name: str) -> int:
    """bpf(BPF_PROG_LOAD) of a SCHED_CLS program: its fd."""
    libc = ctypes.CDLL(None, use_errno=True)
    code = ctypes.create_string_buffer(insns, len(insns))
    lic = ctypes.create_string_buffer(b"GPL")
    log_buf = ctypes.create_string_buffer(4096)
    attr = ctypes.create_string_buffer(128)
    # prog_type, insn_cnt, insns, license, log_level, log_size, log_buf, kern_version, prog_flags, prog_name
    struct.pack_into("<IIQQIIQII16s", attr, 0, BPF_PROG_TYPE_SCHED_CLS, len(insns) // 8, ctypes.addressof(code),
                     ctypes.addressof(lic), 1, len(log_buf), ctypes.addressof(log_buf), 0, 0, name.encode()[:15])
    fd = libc.syscall(SYS_BPF, BPF_PROG_LOAD, attr, len(attr))
    if fd < 0:
        e = ctypes.get_errno()
        raise VerbsError(e, f"cannot load the VF VLAN program: {os.strerror(e)}:"
                            f" {log_buf.value.decode(errors='replace').strip()}")
    return fd


def tag(netdev: str, vlan: int, qos: int) -> None:
    """``netdev`` becomes a VST port of VLAN ``vlan`` (PCP ``qos``); vlan
    0 and qos 0: untagged again (its programs removed)."""
    from pyroute2 import IPRoute
    from pyroute2.netlink.exceptions import NetlinkError
    with IPRoute() as ipr:
        idx = ipr.link_lookup(ifname=netdev)
        if not idx:
            raise VerbsError(errno.ENODEV, f"no netdev {netdev!r}")
        try:
            ipr.tc("del", "clsact", idx[0])
        except NetlinkError as e:
            if e.code not in (errno.ENOENT, errno.EINVAL):
                raise VerbsError(e.code, f"cannot clear {netdev}'s VLAN: {os.strerror(e.code)}") from None
        if not vlan and not qos:
            return
        fds = []
        try:
            fds = [_load(egress_program(vlan, qos), "vf_vlan_push"), _load(ingress_program(vlan), "vf_vlan_pop")]
            ipr.tc("add", "clsact", idx[0])
            for fd, parent, name in ((fds[0], EGRESS, "vf_vlan_push"), (fds[1], INGRESS, "vf_vlan_pop")):
                ipr.tc("add-filter", "bpf", idx[0], ":1", fd=fd, name=name, parent=parent, classid=1,
                       direct_action=True)
        except NetlinkError as e:
            try:
                ipr.tc("del", "clsact", idx[0])
            except NetlinkError:
                pass
            raise VerbsError(e.code or errno.EIO, f"cannot tag {netdev} with VLAN {vlan}:"
                                                  f" {os.strerror(e.code or errno.EIO)}") from None
        finally:
            for fd in fds:
                os.close(fd)                # (the filters hold the programs)


def bind_sockets(dev, netdev: str | None) -> None:
    """A VF's sockets send and receive only through its netdev (None:
    unbound, as any other device's)."""
    name = (netdev or "").encode()
    for sk in dev.sockets:
        try:
            sk.sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, name)
        except OSError as e:
            log.warning("%s: cannot bind %s to %s: %s", dev.name, sk.ip, netdev, e.strerror)


def eswitch_vlan(pf: str, vlan: int, qos: int):
    """A VF port's ``eswitch_vlan`` (``pf``: its PF's device): None untagged."""
    return (pf, vlan) if vlan or qos else None


__all__ = ["check", "parse_file", "tag", "bind_sockets", "eswitch_vlan", "egress_program", "ingress_program"]
