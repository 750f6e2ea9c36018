from ..verbs.device import Context, Device, DeviceAttr, PortAttr, get_device_list  # noqa: F401
from ._unsupported import unsupported

DM = unsupported("DM", "device memory does not exist on a software device")
AllocDmAttr = unsupported("AllocDmAttr", "device memory does not exist on a software device")
DeviceAttrEx = DeviceAttr
