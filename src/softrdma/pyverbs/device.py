from ..verbs.device import (  # noqa: F401
    AsyncEvent, Context, CQModerationCaps, Device, DeviceAttr, DeviceAttrEx, GIDEntry, ODPCaps, PacketPacingCaps, PCIAtomicCaps, PortAttr,
    RSSCaps, TMCaps, TSOCaps, get_device_list,
)
from ..verbs.translate import (  # noqa: F401
    guid_format, guid_to_hex, phys_state_to_str, port_state_to_str, speed_to_str, translate_gid_type,
    translate_link_layer, translate_mtu, translate_node_type, translate_transport_type, width_to_str,
)
from ..verbs.dm import DM, AllocDmAttr  # noqa: F401


class FdArr:
    """ibv_fd_arr (rdma-core 64): the file descriptors mlx5dv_open_device is
    given with MLX5DV_CONTEXT_ATTR_MASK_FD_ARRAY."""

    def __init__(self, arr=(), count: int = 0):
        self._arr = [int(fd) for fd in list(arr)[:count]]

    @property
    def arr(self) -> list:
        return list(self._arr)

    @property
    def count(self) -> int:
        return len(self._arr)

    def close(self) -> None:
        pass

    def __str__(self) -> str:
        return f"{'Number of fd in arr':20}: {self.count:<20}\n{'FDs in arr':20}: {self.arr!s:<20}\n"
