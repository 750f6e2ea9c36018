from ..verbs.device import (  # noqa: F401
    Context, CQModerationCaps, Device, DeviceAttr, DeviceAttrEx, ODPCaps, PacketPacingCaps, PCIAtomicCaps, PortAttr,
    RSSCaps, TMCaps, TSOCaps, get_device_list,
)
from ._unsupported import unsupported

DM = unsupported("DM", "device memory does not exist on a software device")
AllocDmAttr = unsupported("AllocDmAttr", "device memory does not exist on a software device")
