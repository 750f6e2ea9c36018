from ..verbs.device import (  # noqa: F401
    Context, CQModerationCaps, Device, DeviceAttr, DeviceAttrEx, GIDEntry, ODPCaps, PacketPacingCaps, PCIAtomicCaps, PortAttr,
    RSSCaps, TMCaps, TSOCaps, get_device_list,
)
from ..verbs.translate import (  # noqa: F401
    guid_format, guid_to_hex, phys_state_to_str, port_state_to_str, speed_to_str, translate_gid_type,
    translate_link_layer, translate_mtu, translate_node_type, translate_transport_type, width_to_str,
)
from ..verbs.dm import DM, AllocDmAttr  # noqa: F401
