"""pyverbs.providers.mlx5.mlx5_vfio: mlx5 over VFIO (a PCI function driven
from user space); softrdma has no PCI device, so the context fails."""

from .._vendor import other_vendor


class Mlx5VfioAttr:
    """mlx5dv_vfio_context_attr: the PCI function's name, flags, comp_mask."""

    def __init__(self, pci_name, flags=0, comp_mask=0):
        self.pci_name = pci_name
        self.flags = flags
        self.comp_mask = comp_mask


globals().update(other_vendor("mlx5", "Mlx5VfioContext"))
