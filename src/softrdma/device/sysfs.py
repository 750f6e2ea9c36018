"""The kernel's /sys/class/infiniband layout, as plain files under a root.

``SysfsTree(root)`` writes ``root/class/infiniband/<dev>/...`` and
``root/class/infiniband_verbs/...`` with the contents the kernel's show
functions print (drivers/infiniband/core/sysfs.c, uverbs_main.c, rxe).
Every value ends in ``\\n`` as sysfs_emit's formats do.

Device (``add_device``; sysfs.c ``ib_dev_attrs`` + the driver's group):

==================  =========================================================
node_type           ``"%u: %s"``: ``1: CA`` (2 switch, 3 router, 4 RNIC,
                    5 usNIC, 6 usNIC UDP, 7 unspecified)
node_guid           ``"%04x:%04x:%04x:%04x"`` of the big-endian GUID;
sys_image_guid      rxe: both the EUI-64 of the MAC, ``5054:00ff:fe77:0002``
fw_ver              ``ib_get_device_fw_str``; rxe has no get_dev_fw_str, so
                    its file is an empty line
node_desc           ``"%.64s"``; rxe: ``rxe`` (mode 0644: writable in the kernel)
hca_type, board_id, driver attributes (mlx5, pvrdma, ...); rxe has none of
hw_rev              them, its only driver attribute is ``parent`` (netdev
                    name).  None = the file is not created.
==================  =========================================================

Port N (``set_port``, ``set_gids``, ``set_pkeys``, ``update_counters``):

==================  =========================================================
state               ``"%d: %s"``: ``4: ACTIVE`` (0 NOP, 1 DOWN, 2 INIT,
                    3 ARMED, 5 ACTIVE_DEFER, else UNKNOWN)
phys_state          ``"%u: %s"``: ``5: LinkUp`` (1 Sleep, 2 Polling, 3 Disabled,
                    4 PortConfigurationTraining, 6 LinkErrorRecovery,
                    7 Phy Test, else ``<unknown>``)
rate                ``"%d%s Gb/sec (%dX%s)"``: ``2.5 Gb/sec (1X SDR)``; see
                    ``rate_str``
lid, sm_lid         ``"0x%x"``: ``0x0``
sm_sl,              ``"%u"``: ``0``
lid_mask_count
cap_mask            ``"0x%08x"``: rxe ``0x00010000`` (IB_PORT_CM_SUP)
link_layer          ``Ethernet`` / ``InfiniBand`` / ``Unknown``
gids/I              ``%pI6``: eight 4-digit groups; a free slot reads as the
                    zero GID ``0000:...:0000`` (show_port_gid returns it)
gid_attrs/types/I   ``RoCE v2`` (or ``IB/RoCE v1``)
gid_attrs/ndevs/I   the netdev name
pkeys/I             ``"0x%04x"``: rxe has one, ``0xffff``
hw_counters/<name>  ``"%llu"`` per driver counter (rxe: rxe_hw_counters.c's
                    15 names in 6.x, softrdma.transport.counters'
                    RXE_HW_COUNTERS; 2026 patches add sent_bytes and
                    rcvd_bytes) and ``lifespan`` (``"%d"`` ms, mode 0644)
counters/<name>     the PMA PortCounters(Ext) table, decimal; see below
==================  =========================================================

**Free GID slots in a file tree.**  For a free slot the kernel creates
gid_attrs/types/I and gid_attrs/ndevs/I but the read fails with EINVAL
(``_show_port_gid_attr``: "-EINVAL is returned for user space compatibility
reasons").  A plain file cannot fail a read, so a free slot's types/ndevs
file exists and is **empty** (0 bytes): ``cat`` prints nothing (as with the
kernel, minus the error message), C readers that test ``read() <= 0`` or
``fgets() == NULL`` skip it exactly as they skip the kernel's EINVAL, and
``read_attr()`` here raises ``OSError(EINVAL)`` for it.  (libibverbs'
sysfs fallback in ``ibv_query_gid_type`` maps EINVAL to "IB/RoCE v1" but a
zero-length read to an error; current rdma-core asks the kernel through
ioctl instead, so it never reads these files.)  A used slot's files always
have content, so "empty" is unambiguous.

**counters/.**  The kernel creates ports/N/counters only for a device with
``process_mad`` (sysfs.c ``setup_port``); rxe through at least 6.1 (the
rxe-vm guest) has none, so it has **no counters/ directory** -- pass
``counters=None``.  rxe_mad.c (2026) adds a PMA with
IB_PMA_CLASS_CAP_EXT_WIDTH, which selects ``pma_attrs_ext``: the 21 names
of ``PMA_COUNTERS_EXT`` (the same 21 as the mlx5 tree in the seed), with
port_xmit_data/port_rcv_data = bytes >> 2 (IBA counts data in 4-byte words,
which is why node_exporter multiplies them by 4), port_xmit_packets /
port_rcv_packets = sent_pkts / rcvd_pkts, link_downed (8 bits, saturating),
everything else 0: ``rxe_pma_counters()`` computes exactly that.  Narrow PMA
counters saturate at all ones (IBA 16.1.3.5); values written are clamped
to their width.

**infiniband_verbs.**  ``class/infiniband_verbs/abi_version`` (``6``,
IB_USER_VERBS_ABI_VERSION) and ``uverbsN/{ibdev,abi_version}`` (rxe's
uverbs ABI is 2), N the lowest free number as the kernel's ida gives.  The
``dev`` (major:minor) file and /dev/infiniband/uverbsN are not made: there
is no character device behind this tree.

Who reads what:

* node_exporter's infiniband collector (prometheus/procfs
  sysfs/class_infiniband.go): every entry of class/infiniband is a device;
  ``fw_ver`` must exist, and before procfs PR #556 (August 2023; Debian
  12's node_exporter 1.5.0 and Ubuntu 22.04's 1.3.1 are older) so must
  ``board_id``: a device without one fails the whole collector
  ("infiniband statistics not found"), which is what happens to real rxe
  there.  The daemon's devices therefore carry a ``board_id`` driver
  attribute with an empty board id (``softrdma_device_attrs``): the
  collector reads "" (what newer procfs reports when the file is absent),
  and ibv_devinfo, which prints the line only for a non-empty read (the
  trailing newline stripped), prints what it prints for rxe.  ``hca_type``
  is optional in every version; every entry of ``ports`` must be a
  decimal number; ``state``/``phys_state`` must split on ":" into exactly
  two parts, an integer and a name; ``rate``'s first
  word is parsed as a float32 of Gb/s; ``counters`` and ``hw_counters``
  are read only if present, each regular file with one 128-byte read,
  whitespace-trimmed, parsed by Go's ParseUint(base 0) (decimal here, so
  never a leading zero), ``port_xmit_data``/``port_rcv_data`` times 4.  An
  empty file in counters/ or hw_counters/ would fail the whole scrape, so
  those directories never hold one (temporary files live in ``.staging``).
* ibstat (libibumad ``get_ca``/``get_port``): node_type, fw_ver, hw_rev,
  hca_type (optional), node_guid, sys_image_guid, every entry of ports/ a
  number, lid_mask_count, sm_lid, sm_sl, lid, state, phys_state, rate,
  cap_mask (read with strtoul, so ``4: ACTIVE`` gives 4), link_layer,
  gids/0, and at least one pkeys/ file.  (It also needs class/infiniband_mad,
  the umad devices, which this tree does not fake; its paths are fixed at
  /sys.)
* ibv_devinfo: device and port attributes come from the uverbs device
  (ioctl), not sysfs; it reads ``board_id`` from sysfs and prints it when
  the read is non-empty.

**device/net.**  In the kernel ``<dev>/device`` is a link to the ib device's
parent, rxe's the netdev's parent device (``rxe_dma_device``: a NIC's PCI or
virtio device), and that device's ``net/`` lists its netdevs -- which is how
rdma-core's tests (base.py ``get_net_name``: ``ls
/sys/class/infiniband/<dev>/device/net/``, then ``ip -j addr show``) and
rdma_cm users find the device's netdev and IP address.  Here ``device/`` is a
directory whose ``net/`` holds one entry, the device's netdev, a symlink to
``/sys/class/net/<netdev>`` (the netdev's real sysfs directory), for every
netdev -- also lo, veth and dummy, where kernel rxe (no parent device) has no
``device`` link and those lookups find nothing.  The daemon's devices get it
(``softrdma_device_attrs``); ``rxe_device_attrs`` alone, the kernel's rxe
on a virtual netdev, does not.  A ConnectX-like device's ``device/`` also
holds the PCI function's files (``device.pci``, ``device.sriov``).

**Writes.**  Every file is written to ``root/.staging`` and moved into place
with ``os.replace``, so a reader sees the old or the new content, never a
partial one, and no temporary name ever appears in a listed directory.  The
tree remembers what it last wrote and skips unchanged files, so the daemon's
once-a-second ``update_counters`` costs one write per counter that moved;
``set_gids`` writes all ``capacity`` slots once (3 files each: 3072 for
rxe's 1024; measured 50-70 ms on tmpfs, 0.13-1.6 s on ext4 depending
on load, once per device) and after that only the slots that changed (a resync with nothing
changed: ~1 ms; a counter refresh with a few moved values: 0.3 ms on tmpfs,
~2 ms on ext4).  Keeping all 1024 slots as files, as the kernel does, is
what makes ``ls gids`` and the rxe-vm ``rxe-gids`` grep behave the same.
Single-threaded use (the daemon's loop) is assumed.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from itertools import count
from pathlib import Path
from typing import Iterable, Mapping, Optional

from .gid import ZERO_GID, GidTable, eui64, gid_str

#: where device/net/<netdev> points: the netdev's own sysfs directory as
#: the reader sees it (its netns' sysfs; /sys/class passes through the overlay)
SYS_CLASS_NET = "/sys/class/net"

#: the RDMA_NODE_* names of sysfs.c node_type_string()
NODE_TYPES = {1: "CA", 2: "switch", 3: "router", 4: "RNIC", 5: "usNIC",
              6: "usNIC UDP", 7: "unspecified"}
#: state_show()'s state_name[]
PORT_STATES = {0: "NOP", 1: "DOWN", 2: "INIT", 3: "ARMED", 4: "ACTIVE",
               5: "ACTIVE_DEFER"}
#: phys_state_to_str()
PHYS_STATES = {0: "<unknown>", 1: "Sleep", 2: "Polling", 3: "Disabled",
               4: "PortConfigurationTraining", 5: "LinkUp",
               6: "LinkErrorRecovery", 7: "Phy Test"}
#: rate_show(): speed name -> deci-Gb/s per lane
SPEEDS = {"SDR": 25, "DDR": 50, "QDR": 100, "FDR10": 100, "FDR": 140,
          "EDR": 250, "HDR": 500, "NDR": 1000, "XDR": 2000}
WIDTHS = (1, 2, 4, 8, 12)

#: pma_attrs_ext (IB_PMA_CLASS_CAP_EXT_WIDTH), name -> counter width in bits,
#: in the kernel's order
PMA_COUNTERS_EXT = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_data": 64,
    "port_rcv_data": 64,
    "port_xmit_packets": 64,
    "port_xmit_wait": 32,
    "port_rcv_packets": 64,
    "unicast_rcv_packets": 64,
    "unicast_xmit_packets": 64,
    "multicast_rcv_packets": 64,
    "multicast_xmit_packets": 64,
}

#: RDMA_HW_STATS_DEFAULT_LIFESPAN (ms).  The file shows
#: jiffies_to_msecs(msecs_to_jiffies(10)): 10 with HZ=1000, 12 with HZ=250.
DEFAULT_LIFESPAN_MS = 10
#: IB_USER_VERBS_ABI_VERSION, class/infiniband_verbs/abi_version
UVERBS_CLASS_ABI = 6
#: RXE_UVERBS_ABI_VERSION, uverbsN/abi_version of an rxe device
RXE_UVERBS_ABI = 2
#: RXE_PORT_PORT_CAP_FLAGS = IB_PORT_CM_SUP
RXE_CAP_MASK = 0x00010000

_U64 = (1 << 64) - 1
_NAME_RE = re.compile(r"[^/\x00]+")

RO, RW = 0o444, 0o644


def guid_str(guid: bytes | int) -> str:
    """node_guid_show's ``%04x:%04x:%04x:%04x`` of a big-endian GUID (8 bytes,
    or the GUID as an integer)."""
    if isinstance(guid, int):
        if not 0 <= guid <= _U64:
            raise ValueError("a GUID is 64 bits")
        guid = guid.to_bytes(8, "big")
    guid = bytes(guid)
    if len(guid) != 8:
        raise ValueError(f"a GUID is 8 bytes, got {len(guid)}")
    h = guid.hex()
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def rate_str(speed: str = "SDR", width: int = 1) -> str:
    """rate_show(): e.g. ("SDR", 1) -> "2.5 Gb/sec (1X SDR)",
    ("EDR", 4) -> "100 Gb/sec (4X EDR)".  Unknown speeds print as SDR, as
    the kernel does."""
    if width not in WIDTHS:
        raise ValueError(f"width {width} not one of {WIDTHS}")
    if speed not in SPEEDS:
        speed = "SDR"
    rate = SPEEDS[speed] * width
    return f"{rate // 10}{'.5' if rate % 10 else ''} Gb/sec ({width}X {speed})"


def rxe_device_attrs(mac: bytes | str, netdev: str) -> dict:
    """add_device() keywords for an rxe device on ``netdev`` with ``mac``
    (rxe_register_device / rxe_init_device_param)."""
    guid = eui64(mac)
    return dict(node_guid=guid, sys_image_guid=guid, fw_ver="", node_desc="rxe",
                node_type=1, parent=netdev, uverbs_abi_ver=RXE_UVERBS_ABI)


def softrdma_device_attrs(mac: bytes | str, netdev: str) -> dict:
    """What the daemon gives ``add_device``: rxe's attributes plus a
    ``board_id`` driver attribute whose board id is empty (``"%.*s\n"`` of
    "" is ``\n``), because node_exporter's collector before procfs PR #556
    requires the file (see "Who reads what"), and ``device/net/<netdev>``
    (see "device/net")."""
    return dict(rxe_device_attrs(mac, netdev), board_id="", net=netdev)


def rxe_pma_counters(sent_bytes: int = 0, rcvd_bytes: int = 0, sent_pkts: int = 0,
                     rcvd_pkts: int = 0, link_downed: int = 0) -> dict[str, int]:
    """The counters/ values rxe_mad.c's PMA reports (the rest are 0): data in
    4-byte words (bytes >> 2), packets as counted, link_downed clamped to 8
    bits."""
    return {
        "port_xmit_data": sent_bytes >> 2,
        "port_rcv_data": rcvd_bytes >> 2,
        "port_xmit_packets": sent_pkts,
        "port_rcv_packets": rcvd_pkts,
        "link_downed": max(0, min(link_downed, 0xFF)),
    }


def read_attr(path: os.PathLike | str) -> str:
    """Read one attribute as a kernel sysfs read would return it, without the
    trailing newline; a zero-length file (a free GID slot's types/ndevs
    entry) raises OSError(EINVAL) like the kernel's read."""
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise OSError(errno.EINVAL, os.strerror(errno.EINVAL), os.fspath(path))
    text = data.decode()
    return text[:-1] if text.endswith("\n") else text


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or name in (".", "..") or not _NAME_RE.fullmatch(name):
        raise ValueError(f"bad {kind} name {name!r}")
    return name


def _u64(name: str, v: int) -> int:
    v = int(v)
    if not 0 <= v <= _U64:
        raise ValueError(f"{name}={v}: counters are unsigned 64-bit")
    return v


class SysfsTree:
    """Writes and updates the sysfs layout under ``root`` (see the module
    docstring for every file and format)."""

    def __init__(self, root: os.PathLike | str, *, lifespan_ms: int = DEFAULT_LIFESPAN_MS):
        self.root = Path(root)
        self.ib_class = self.root / "class" / "infiniband"
        self.verbs_class = self.root / "class" / "infiniband_verbs"
        self.cm_class = self.root / "class" / "infiniband_cm"
        self.mad_class = self.root / "class" / "infiniband_mad"
        self.lifespan_ms = lifespan_ms
        self._staging = self.root / ".staging"
        self._tag = f"{os.getpid()}-{id(self):x}"
        self._seq = count()
        self._written: dict[str, str] = {}
        self._uverbs: dict[str, int] = {}
        self._umad: dict[tuple[str, int], int] = {}      # (device, port) -> N of umadN / issmN
        self._gid_capacity: dict[tuple[str, int], int] = {}
        #: files actually written (not skipped as unchanged), for measurement
        self.writes = 0
        for d in (self.ib_class, self.verbs_class, self._staging):
            d.mkdir(parents=True, exist_ok=True)
        self._put(self.verbs_class / "abi_version", f"{UVERBS_CLASS_ABI}\n")

    # -- paths -----------------------------------------------------------------

    def device_path(self, dev: str) -> Path:
        return self.ib_class / _check_name("device", dev)

    def port_path(self, dev: str, port: int) -> Path:
        return self.device_path(dev) / "ports" / str(int(port))

    def uverbs_index(self, dev: str) -> int:
        return self._uverbs[dev]

    def devices(self) -> list[str]:
        return sorted(self._uverbs)

    # -- the one write path -----------------------------------------------------

    def _put(self, path: Path | str, text: str, mode: int = RO) -> bool:
        """Atomically make ``path`` contain ``text`` (skipped if that is what
        this tree last wrote there).  Returns whether a write happened."""
        key = os.fspath(path)
        prev = self._written.get(key)
        if prev == text:
            return False
        if prev is None:
            # A file this tree never wrote: create it in place (no rename).
            # Nobody has seen it yet, and a rename per file made creating a
            # device's 3072 GID files take seconds on a journalled disk.
            try:
                fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
            except FileExistsError:
                fd = None
            if fd is not None:
                try:
                    data = text.encode()
                    while data:
                        data = data[os.write(fd, data):]
                finally:
                    os.close(fd)
                self._written[key] = text
                self.writes += 1
                return True
        tmp = os.path.join(self._staging, f"{self._tag}.{next(self._seq)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
        try:
            data = text.encode()
            while data:
                data = data[os.write(fd, data):]
        finally:
            os.close(fd)
        try:
            os.replace(tmp, key)
        except BaseException:
            os.unlink(tmp)
            raise
        self._written[key] = text
        self.writes += 1
        return True

    def put(self, path: Path | str, text: str, mode: int = RO) -> bool:
        """``_put`` for the modules that write a device's other directories
        (``device.pci``, ``device.sriov``): one write path for the tree."""
        return self._put(path, text, mode)

    def remove(self, path: Path | str) -> None:
        """Remove a file or directory of the tree and forget what was
        written there."""
        path = Path(path)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        key = os.fspath(path)
        self._written.pop(key, None)
        for k in [k for k in self._written if k.startswith(key + os.sep)]:
            del self._written[k]

    def _require(self, dev: str) -> Path:
        if dev not in self._uverbs:
            raise KeyError(f"no device {dev!r} in this tree")
        return self.device_path(dev)

    # -- devices ---------------------------------------------------------------

    def add_device(self, name: str, node_guid: bytes | int,
                   sys_image_guid: bytes | int | None = None, fw_ver: str = "",
                   hca_type: Optional[str] = None, board_id: Optional[str] = None,
                   hw_rev: Optional[str] = None, node_desc: str = "",
                   node_type: int = 1, *, parent: Optional[str] = None,
                   uverbs_abi_ver: int = RXE_UVERBS_ABI, net: Optional[str] = None) -> Path:
        """Create class/infiniband/<name> with the device attributes and its
        class/infiniband_verbs/uverbsN entry.  ``sys_image_guid`` defaults to
        ``node_guid``; None for hca_type/board_id/hw_rev/parent leaves the file
        out (rxe: see ``rxe_device_attrs``).  ``net``: the netdev the device
        runs on, made ``device/net/<net>`` (see "device/net")."""
        if name in self._uverbs:
            raise FileExistsError(f"device {name!r} already in this tree")
        if net is not None:
            _check_name("netdev", net)      # before anything is written
        d = self.device_path(name)
        if d.exists():                      # left over from an earlier run
            shutil.rmtree(d)
        (d / "ports").mkdir(parents=True)
        self._put(d / "node_type", f"{node_type}: {NODE_TYPES.get(node_type, '<unknown>')}\n")
        self._put(d / "node_guid", guid_str(node_guid) + "\n")
        self._put(d / "sys_image_guid",
                  guid_str(node_guid if sys_image_guid is None else sys_image_guid) + "\n")
        self._put(d / "fw_ver", f"{fw_ver}\n")
        self._put(d / "node_desc", f"{node_desc[:64]}\n", RW)
        for fname, value in (("hca_type", hca_type), ("board_id", board_id),
                             ("hw_rev", hw_rev), ("parent", parent)):
            if value is not None:
                self._put(d / fname, f"{value}\n")
        if net is not None:
            n = d / "device" / "net"
            n.mkdir(parents=True)
            os.symlink(os.path.join(SYS_CLASS_NET, net), n / net)

        used = set(self._uverbs.values())
        n = next(i for i in count() if i not in used)
        self._uverbs[name] = n
        u = self.verbs_class / f"uverbs{n}"
        if u.exists():
            shutil.rmtree(u)
        u.mkdir()
        self._put(u / "ibdev", f"{name}\n")
        self._put(u / "abi_version", f"{uverbs_abi_ver}\n")
        return d

    def update_cm_counters(self, dev: str, port: int, groups: Mapping[str, Mapping[str, int]]) -> None:
        """ib_cm's counters: class/infiniband_cm/DEV/PORT/GROUP/MESSAGE, the
        groups cm_tx_msgs, cm_tx_retries, cm_rx_msgs, cm_rx_duplicates and
        the messages req, mra, rej, rep, rtu, dreq, drep, sidr_req,
        sidr_rep, lap, apr (cm.c's cm_counter_attr)."""
        base = self.cm_class / _check_name("device", dev) / str(int(port))
        for group, values in groups.items():
            g = base / _check_name("counter group", group)
            g.mkdir(parents=True, exist_ok=True)
            for name, v in values.items():
                self._put(g / _check_name("counter", name), f"{_u64(name, v)}\n")

    def add_umad(self, dev: str, port: int) -> int:
        """ib_umad's entries of an InfiniBand port: class/infiniband_mad/umadN
        and issmN, each with ``ibdev`` and ``port``; N is the lowest free
        number (ib_umad's IDA: mlx5_0's ports 1 and 2 are umad0 and umad1
        when added in that order).  Returns N."""
        self._require(dev)
        if (dev, int(port)) in self._umad:
            return self._umad[(dev, int(port))]
        used = set(self._umad.values())
        n = next(i for i in count() if i not in used)
        self._umad[(dev, int(port))] = n
        self.mad_class.mkdir(parents=True, exist_ok=True)
        self._put(self.mad_class / "abi_version", "5\n")           # IB_USER_MAD_ABI_VERSION
        for kind in ("umad", "issm"):
            d = self.mad_class / f"{kind}{n}"
            d.mkdir(parents=True, exist_ok=True)
            self._put(d / "ibdev", f"{dev}\n")
            self._put(d / "port", f"{int(port)}\n")
        return n

    def umad_entries(self, dev: str) -> list[Path]:
        return [self.mad_class / f"{kind}{n}" for (d, _), n in self._umad.items() if d == dev
                for kind in ("umad", "issm")]

    def remove_port(self, dev: str, port: int) -> None:
        """Remove one port of a device (``rdma link delete NAME/N``): its
        ports/N directory, its counter group and its umad/issm entries."""
        self._require(dev)
        n = self._umad.pop((dev, int(port)), None)
        umads = [self.mad_class / f"{kind}{n}" for kind in ("umad", "issm")] if n is not None else []
        for path in (self.port_path(dev, port), self.cm_class / dev / str(int(port)), *umads):
            shutil.rmtree(path, ignore_errors=True)
            prefix = os.fspath(path) + os.sep
            for key in [k for k in self._written if k.startswith(prefix)]:
                del self._written[key]
        self._gid_capacity.pop((dev, int(port)), None)

    def remove_device(self, name: str) -> None:
        """Remove the device's directory and its uverbs and umad entries."""
        d = self._require(name)
        n = self._uverbs.pop(name)
        umads = self.umad_entries(name)
        for key in [k for k in self._umad if k[0] == name]:
            del self._umad[key]
        for path in (d, self.verbs_class / f"uverbs{n}", self.cm_class / name, *umads):
            shutil.rmtree(path, ignore_errors=True)
            prefix = os.fspath(path) + os.sep
            for key in [k for k in self._written if k.startswith(prefix)]:
                del self._written[key]
        for key in [k for k in self._gid_capacity if k[0] == name]:
            del self._gid_capacity[key]

    # -- ECN / DCQCN (mlx5's /sys/class/net/<netdev>/ecn) -----------------------

    def ecn_path(self, netdev: str) -> Path:
        """mlx5's ``/sys/class/net/<netdev>/ecn``, here ``root/ecn/<netdev>``:
        not under ``class/``, where a directory would hide the netdev's own
        sysfs directory from the overlay ``softrdma run`` mounts."""
        return self.root / "ecn" / _check_name("netdev", netdev)

    def set_ecn(self, netdev: str, settings: Mapping) -> None:
        """Write ``roce_np/`` and ``roce_rp/`` (a file per knob, mode 0644,
        ``enable/0`` .. ``enable/7``) from ``CongestionControl.as_dict``."""
        base = self.ecn_path(netdev)
        for point in ("roce_np", "roce_rp"):
            d = base / point
            (d / "enable").mkdir(parents=True, exist_ok=True)
            for name, v in settings[point].items():
                if name == "enable":
                    for prio, on in enumerate(v):
                        self._put(d / "enable" / str(prio), f"{int(on)}\n", RW)
                else:
                    self._put(d / name, f"{int(v)}\n", RW)

    def ecn_writes(self, netdev: str) -> list[tuple[str, str, int | None, str]]:
        """What someone wrote into the ECN files since this tree did: (point
        "np"/"rp", knob, priority for ``enable`` else None, the text)."""
        out = []
        for parts, now in self.writes_under(self.ecn_path(netdev)):
            prio = int(parts[2]) if len(parts) == 3 else None      # roce_xx/knob or roce_xx/enable/N
            out.append((parts[0][5:], parts[1], prio, now))
        return out

    def writes_under(self, base: Path) -> list[tuple[list[str], str]]:
        """Files under ``base`` whose content is no longer what this tree
        wrote there (someone wrote them): (path parts below ``base``, the
        text).  Each is forgotten, so the next write of the tree's own
        puts its value back, whatever the caller made of the text."""
        prefix = os.fspath(base) + os.sep
        out = []
        for key, text in list(self._written.items()):
            if not key.startswith(prefix):
                continue
            try:
                with open(key) as f:
                    now = f.read()
            except OSError:
                continue
            if now != text:
                out.append((key[len(prefix):].split(os.sep), now))
                del self._written[key]
        return out

    def remove_ecn(self, netdev: str) -> None:
        self._remove_tree(self.ecn_path(netdev))

    def _remove_tree(self, base: Path) -> None:
        shutil.rmtree(base, ignore_errors=True)
        prefix = os.fspath(base) + os.sep
        for key in [k for k in self._written if k.startswith(prefix)]:
            del self._written[key]

    # -- IPoIB interfaces ------------------------------------------------------
    def net_path(self, ifname: str) -> Path:
        """An IPoIB interface's ``/sys/class/net/<ifname>`` files (ipoib's
        ``address``, ``broadcast``, ``mode``, ``pkey``, ``umcast``, ...),
        here ``root/net/<ifname>``: beside ``class/`` as ``ecn/`` is, so
        the interface's own sysfs directory stays visible."""
        return self.root / "net" / _check_name("netdev", ifname)

    def set_net(self, ifname: str, attrs: Mapping[str, str]) -> None:
        """Write each attribute (``mode``, ``umcast``, ``create_child``,
        ``delete_child``: 0644, the rest read-only)."""
        base = self.net_path(ifname)
        base.mkdir(parents=True, exist_ok=True)
        for name, v in attrs.items():
            writable = name in ("mode", "umcast", "create_child", "delete_child")
            self._put(base / name, f"{v}\n" if v != "" else "", RW if writable else RO)

    def remove_net(self, ifname: str) -> None:
        self._remove_tree(self.net_path(ifname))

    # -- ports -----------------------------------------------------------------

    def set_port(self, dev: str, port: int, state: int = 4, phys_state: int = 5,
                 rate: str | tuple[str, int] = "2.5 Gb/sec (1X SDR)", lid: int = 0,
                 sm_lid: int = 0, lid_mask_count: int = 0, cap_mask: int = RXE_CAP_MASK,
                 link_layer: str = "Ethernet", sm_sl: int = 0) -> Path:
        """Write the port attributes (defaults: an ACTIVE rxe port).  ``rate``
        is the rate_show() text or a (speed, width) pair for ``rate_str``."""
        self._require(dev)
        if int(port) < 0:
            raise ValueError("port numbers are >= 0")
        p = self.port_path(dev, port)
        p.mkdir(parents=True, exist_ok=True)
        if isinstance(rate, tuple):
            rate = rate_str(*rate)
        self._put(p / "state", f"{state}: {PORT_STATES.get(state, 'UNKNOWN')}\n")
        self._put(p / "phys_state", f"{phys_state}: {PHYS_STATES.get(phys_state, '<unknown>')}\n")
        self._put(p / "rate", f"{rate}\n")
        self._put(p / "lid", f"0x{lid:x}\n")
        self._put(p / "sm_lid", f"0x{sm_lid:x}\n")
        self._put(p / "sm_sl", f"{sm_sl}\n")
        self._put(p / "lid_mask_count", f"{lid_mask_count}\n")
        self._put(p / "cap_mask", f"0x{cap_mask:08x}\n")
        self._put(p / "link_layer", f"{link_layer}\n")
        return p

    def _port(self, dev: str, port: int) -> Path:
        self._require(dev)
        p = self.port_path(dev, port)
        if not p.is_dir():
            raise KeyError(f"no port {port} on {dev!r}: call set_port first")
        return p

    def set_gids(self, dev: str, port: int, table: GidTable) -> int:
        """Write gids/I, gid_attrs/types/I and gid_attrs/ndevs/I for every slot
        of ``table`` (free slots: zero GID, empty types/ndevs files).  Returns
        the number of files written (unchanged ones are skipped)."""
        p = self._port(dev, port)
        gids, types, ndevs = p / "gids", p / "gid_attrs" / "types", p / "gid_attrs" / "ndevs"
        for d in (gids, types, ndevs):
            d.mkdir(parents=True, exist_ok=True)
        before = self.writes
        zero = gid_str(ZERO_GID) + "\n"
        written = self._written
        g, t, n = (os.fspath(gids) + os.sep, os.fspath(types) + os.sep,
                   os.fspath(ndevs) + os.sep)
        for i in range(table.capacity):
            e = table[i]
            if e is None:
                want = (zero, "", "")
            else:
                want = (gid_str(e.gid) + "\n", e.type + "\n", e.ndev + "\n")
            name = str(i)
            for prefix, text in zip((g, t, n), want):
                path = prefix + name
                if written.get(path) != text:       # the common case skips here
                    self._put(path, text)
        old = self._gid_capacity.get((dev, int(port)), 0)
        for i in range(table.capacity, old):        # the table shrank
            for d in (gids, types, ndevs):
                path = d / str(i)
                path.unlink(missing_ok=True)
                self._written.pop(os.fspath(path), None)
        self._gid_capacity[(dev, int(port))] = table.capacity
        return self.writes - before

    def set_pkeys(self, dev: str, port: int, pkeys: Iterable[int] = (0xFFFF,)) -> None:
        """pkeys/I = ``0x%04x`` (rxe: one entry, 0xffff)."""
        p = self._port(dev, port) / "pkeys"
        p.mkdir(exist_ok=True)
        pkeys = list(pkeys)
        for i, k in enumerate(pkeys):
            if not 0 <= k <= 0xFFFF:
                raise ValueError(f"P_Key {k:#x} is not 16 bits")
            self._put(p / str(i), f"0x{k:04x}\n")
        for f in p.iterdir():
            if f.name.isdigit() and int(f.name) >= len(pkeys):
                f.unlink()
                self._written.pop(os.fspath(f), None)

    def update_counters(self, dev: str, port: int,
                        counters: Optional[Mapping[str, int]] = None,
                        hw_counters: Optional[Mapping[str, int]] = None) -> int:
        """Refresh ports/N/counters (the PMA table; None = no counters/
        directory, as rxe up to 6.x) and ports/N/hw_counters (driver names,
        plus ``lifespan``).  The first call creates every file of the PMA
        table (missing names read 0); afterwards only values that changed
        are written, each atomically.  Returns the number of files written."""
        p = self._port(dev, port)
        before = self.writes
        if counters is not None:
            unknown = set(counters) - PMA_COUNTERS_EXT.keys()
            if unknown:
                raise ValueError(f"not PMA counters: {sorted(unknown)}")
            c = p / "counters"
            c.mkdir(exist_ok=True)
            for name, width in PMA_COUNTERS_EXT.items():
                v = _u64(name, counters.get(name, 0))
                self._put(c / name, f"{min(v, (1 << width) - 1)}\n")
        if hw_counters is not None:
            h = p / "hw_counters"
            h.mkdir(exist_ok=True)
            for name, v in hw_counters.items():
                if _check_name("counter", name) == "lifespan":
                    raise ValueError("'lifespan' is not a counter")
                self._put(h / name, f"{_u64(name, v)}\n")
            self._put(h / "lifespan", f"{self.lifespan_ms}\n", RW)
        return self.writes - before
