"""The PCI identity a ConnectX-like device presents, and its ``device/``
directory in the sysfs tree as the kernel lays it out for mlx5.

A device whose name starts with ``mlx5_`` is presented as a function of a
ConnectX-5 (the kernel's mlx5 driver names its devices so; ``rxe*`` and
every other name stay rxe, with no PCI identity) -- a RoCE device or an
InfiniBand one alike: the card is a VPI adapter, its port's link type is
the NV configuration's (``device.vpi``); an IB port's PCI class is
InfiniBand (0x0207).  Such a device has:

* a bus address (``DDDD:BB:DD.F``): a physical function (PF) sits alone on
  its bus, ``0000:5e:00.0`` for ``mlx5_0``, the next bus for each next PF
  number; its virtual functions (VFs) follow at routing ID PF + offset +
  i * stride (offset 1, stride 1: ``0000:5e:00.1``, ``.2``, ...), as the
  SR-IOV capability places them;
* vendor 0x15b3 (Mellanox), device 0x1017 (ConnectX-5; its VFs 0x1018),
  the MST name ``mt4119`` (``/dev/mst/mt4119_pciconf0``), hca_type
  ``MT4119`` (VFs ``MT4120``), board_id = the PSID, a firmware version;
* in the sysfs tree, ``class/infiniband/<dev>/device/`` holding what
  ``/sys/bus/pci/devices/<bdf>/`` holds for it: ``vendor``, ``device``,
  ``subsystem_vendor``, ``subsystem_device``, ``class``, ``revision``,
  ``numa_node``, ``uevent`` (``PCI_SLOT_NAME``: the bus address), ``sriov_totalvfs``, ``sriov_numvfs`` (mode 0644;
  mlx5_core's ``mlx5_num_vfs`` too),
  ``sriov_offset``, ``sriov_stride``, ``sriov_vf_device``,
  ``sriov_drivers_autoprobe``, ``virtfnN`` links to the VFs, a VF's
  ``physfn`` link, ``net/<netdev>``, ``infiniband/<dev>`` and mlx5's
  ``sriov/<N>/`` (``sriov/N/{node,port,policy,mac,vlan,spoofcheck,trust,
  link_state,max_tx_rate,min_tx_rate,config,stats}``: ``device.sriov``
  writes them).  The formats are pci-sysfs.c's (``0x%04x``, ``0x%06x``
  for class, ``%u`` for the SR-IOV counts).

Links between functions are relative links inside the tree
(``virtfn0 -> ../../mlx5_1/device``), so they resolve wherever the tree is
mounted.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

VENDOR_MELLANOX = 0x15B3
#: the IB vendor ID (OUI) mlx5 reports in ibv_query_device
IB_VENDOR_ID = 0x02C9
PREFIX = "mlx5_"
#: MLX5_UVERBS_ABI_VERSION (uverbsN/abi_version of an mlx5 device)
MLX5_UVERBS_ABI = 1

#: PCI class codes (pci_ids.h): an Ethernet port, an InfiniBand port
CLASS_ETHERNET = 0x020000
CLASS_INFINIBAND = 0x020700


@dataclass(frozen=True)
class Model:
    """One ConnectX model: what its PF and VF present."""
    name: str               # mlxconfig's "Device type"
    device_id: int          # PCI device ID of the PF
    vf_device_id: int       # ... of its VFs (sriov_vf_device)
    part_id: int            # the MST/IB part number: mt<part_id>, vendor_part_id, hca_type MT<n>
    vf_part_id: int
    part_name: str          # mlxconfig's "Name" (the card's ordering part)
    description: str
    psid: str
    fw_version: str         # the firmware a new device starts with
    fw_release_date: str   # flint's "FW Release Date" (dd.mm.yyyy)
    max_vfs: int            # NUM_OF_VFS's upper bound on this card
    subsystem_device: int = 0x0008


CONNECTX5 = Model("ConnectX5", 0x1017, 0x1018, 4119, 4120, "MCX556A-ECA_Ax",
                  "ConnectX-5 VPI adapter card; EDR IB (100Gb/s) and 100GbE; dual-port QSFP28; PCIe3.0 x16;"
                  " tall bracket; ROHS R6", "MT_0000000008", "16.35.2000", "29.11.2022", 127)
MODELS = {CONNECTX5.name: CONNECTX5}

_BDF_RE = re.compile(r"^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")
VF_OFFSET, VF_STRIDE = 1, 1
FIRST_BUS = 0x5E


def presents_pci(name: str) -> bool:
    """Whether a device of this name is presented as a ConnectX function."""
    return name.startswith(PREFIX)


def pf_bus(name: str) -> int:
    """The bus of a PF named ``mlx5_<n>``: 0x5e + n (another name: 0x5e +
    a number from the name, stable across restarts)."""
    tail = name[len(PREFIX):]
    n = int(tail) if tail.isdigit() else sum(tail.encode()) % 64
    return (FIRST_BUS + n) & 0xFF


@dataclass(frozen=True)
class Bdf:
    domain: int
    bus: int
    dev: int
    fn: int

    @property
    def rid(self) -> int:
        return self.bus << 8 | self.dev << 3 | self.fn

    @classmethod
    def from_rid(cls, domain: int, rid: int) -> "Bdf":
        return cls(domain, rid >> 8 & 0xFF, rid >> 3 & 0x1F, rid & 7)

    @classmethod
    def parse(cls, text: str) -> "Bdf":
        """``0000:5e:00.0`` or ``5e:00.0``; ValueError otherwise."""
        m = _BDF_RE.match(text.strip())
        if not m:
            raise ValueError(f"bad PCI address {text!r}")
        return cls(int(m[1] or "0", 16), int(m[2], 16), int(m[3], 16), int(m[4]))

    def __str__(self) -> str:
        return f"{self.domain:04x}:{self.bus:02x}:{self.dev:02x}.{self.fn}"

    @property
    def short(self) -> str:
        """``5e:00.0``, as mst status -v prints it."""
        return f"{self.bus:02x}:{self.dev:02x}.{self.fn}"


@dataclass
class PciFunction:
    """One PCI function a device presents: a PF or a VF of one."""
    bdf: Bdf
    model: Model = CONNECTX5
    vf_index: int | None = None         # None: a PF
    pf_name: str | None = None          # a VF's PF device
    fw_version: str = ""                # what the PF's firmware reports (a VF shows its PF's)
    psid: str = ""
    #: PF only: sriov_totalvfs (NUM_OF_VFS when SRIOV_EN, else 0, at the last firmware boot)
    total_vfs: int = 0
    vfs: list = field(default_factory=list)    # PF only: the VF device names, by index

    @property
    def is_vf(self) -> bool:
        return self.vf_index is not None

    @property
    def device_id(self) -> int:
        return self.model.vf_device_id if self.is_vf else self.model.device_id

    @property
    def part_id(self) -> int:
        return self.model.vf_part_id if self.is_vf else self.model.part_id

    @property
    def hca_type(self) -> str:
        return f"MT{self.part_id}"

    def vf_bdf(self, i: int) -> Bdf:
        return Bdf.from_rid(self.bdf.domain, self.bdf.rid + VF_OFFSET + i * VF_STRIDE)


def pf_function(name: str, model: Model = CONNECTX5) -> PciFunction:
    return PciFunction(Bdf(0, pf_bus(name), 0, 0), model)


def device_attrs(fn: PciFunction) -> dict:
    """The ``SysfsTree.add_device`` attributes mlx5 shows for this function:
    fw_ver, hca_type, board_id (the PSID), hw_rev 0x0 (mlx5's
    ``hw_rev_show``: ``%x`` of the revision ID); no rxe ``parent`` file;
    mlx5's uverbs ABI version."""
    return dict(fw_ver=fn.fw_version, hca_type=fn.hca_type, board_id=fn.psid, hw_rev="0", parent=None,
                uverbs_abi_ver=MLX5_UVERBS_ABI)


def verbs_attrs(fn: PciFunction) -> dict:
    """What ibv_query_device reports from this function (mlx5: vendor_id is
    the Mellanox OUI, vendor_part_id the part number, fw_ver the running
    firmware)."""
    return {"fw_ver": fn.fw_version, "vendor_id": IB_VENDOR_ID, "vendor_part_id": fn.part_id, "hw_ver": 0}


SRIOV_FILES = ("sriov_totalvfs", "sriov_numvfs", "sriov_offset", "sriov_stride", "sriov_vf_device",
               "sriov_drivers_autoprobe", "mlx5_num_vfs")


def write_device_dir(tree, dev: str, fn: PciFunction, numvfs: int, link_layer: str = "Ethernet",
                     sriov: bool = True) -> Path:
    """Write ``class/infiniband/<dev>/device/``'s PCI files (``net/`` is
    the tree's own).  A PF's SR-IOV files show ``numvfs`` VFs of
    ``fn.total_vfs`` (``sriov`` False: a PF without the SR-IOV capability,
    no such files); ``virtfnN`` links name each VF's directory."""
    d = tree.device_path(dev) / "device"
    (d / "infiniband").mkdir(parents=True, exist_ok=True)
    put = tree.put
    put(d / "vendor", f"0x{VENDOR_MELLANOX:04x}\n")
    put(d / "device", f"0x{fn.device_id:04x}\n")
    put(d / "subsystem_vendor", f"0x{VENDOR_MELLANOX:04x}\n")
    put(d / "subsystem_device", f"0x{fn.model.subsystem_device:04x}\n")
    put(d / "class", f"0x{CLASS_INFINIBAND if link_layer == 'InfiniBand' else CLASS_ETHERNET:06x}\n")
    put(d / "revision", "0x00\n")
    put(d / "numa_node", "-1\n")
    # pci-driver.c's pci_uevent: where the bus address is read from (the
    # kernel's device/ is a link to a directory of that name)
    put(d / "uevent", f"DRIVER=mlx5_core\nPCI_CLASS={CLASS_ETHERNET if link_layer != 'InfiniBand' else CLASS_INFINIBAND:X}\n"
                      f"PCI_ID={VENDOR_MELLANOX:04X}:{fn.device_id:04X}\n"
                      f"PCI_SUBSYS_ID={VENDOR_MELLANOX:04X}:{fn.model.subsystem_device:04X}\n"
                      f"PCI_SLOT_NAME={fn.bdf}\nMODALIAS=pci:v{VENDOR_MELLANOX:08X}d{fn.device_id:08X}"
                      f"sv{VENDOR_MELLANOX:08X}sd{fn.model.subsystem_device:08X}bc02sc{0x07 if link_layer == 'InfiniBand' else 0:02X}i00\n")
    ib = d / "infiniband" / dev
    ib.mkdir(exist_ok=True)
    if fn.is_vf:
        _link(d / "physfn", os.path.join("..", "..", fn.pf_name, "device"))
        return d
    for entry in d.iterdir():
        if entry.name.startswith("virtfn") and entry.is_symlink():
            entry.unlink()
    if not sriov:
        for name in SRIOV_FILES:
            tree.remove(d / name)
        return d
    put(d / "sriov_totalvfs", f"{fn.total_vfs}\n")
    put(d / "sriov_numvfs", f"{numvfs}\n", 0o644)
    put(d / "mlx5_num_vfs", f"{numvfs}\n", 0o644)      # mlx5_core's own name for it (older scripts)
    put(d / "sriov_offset", f"{VF_OFFSET}\n")
    put(d / "sriov_stride", f"{VF_STRIDE}\n")
    put(d / "sriov_vf_device", f"{fn.model.vf_device_id:x}\n")
    put(d / "sriov_drivers_autoprobe", "1\n", 0o644)
    for i, vf in enumerate(fn.vfs):
        _link(d / f"virtfn{i}", os.path.join("..", "..", vf, "device"))
    return d


def _link(path: Path, target: str) -> None:
    if path.is_symlink() or path.exists():
        path.unlink()
    os.symlink(target, path)


__all__ = ["Bdf", "CONNECTX5", "IB_VENDOR_ID", "MODELS", "Model", "PciFunction", "VENDOR_MELLANOX",
           "device_attrs", "pf_function", "presents_pci", "verbs_attrs", "write_device_dir"]
