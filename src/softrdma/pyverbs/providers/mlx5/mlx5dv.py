"""pyverbs.providers.mlx5.mlx5dv: the mlx5 direct-verbs context and objects.

``Mlx5Context`` fails as pyverbs' does on any device mlx5dv_is_supported()
rejects (rxe included): PyverbsUserError('This is not an MLX5 device').
The objects that need an mlx5 context fail with EOPNOTSUPP."""

import errno

from ....verbs.errors import PyverbsRDMAError, PyverbsUserError
from .. import _vendor
from . import mlx5_enums as dve
from .._vendor import other_vendor


class Mlx5DVContextAttr:
    """mlx5dv_context_attr: open flags (MLX5DV_CONTEXT_FLAGS_DEVX) and comp_mask."""

    def __init__(self, flags=0, comp_mask=0):
        self.flags = flags
        self.comp_mask = comp_mask


class Mlx5Context:
    def __init__(self, attr, name=''):
        if attr is None:
            raise TypeError("Mlx5Context needs an Mlx5DVContextAttr")
        raise PyverbsUserError('This is not an MLX5 device')

    @staticmethod
    def device_timestamp_to_ns(ctx, device_timestamp):
        """mlx5dv_get_clock_info on a context that is not mlx5's: EOPNOTSUPP
        (the device's clock converts with softrdma.uapi.clock instead)."""
        raise PyverbsRDMAError('Failed to get the clock info', errno.EOPNOTSUPP)


globals().update(other_vendor(
    "mlx5", "Mlx5DVPortAttr", "Mlx5DevxObj", "Mlx5DVContext", "Mlx5DCIStreamInitAttr", "Mlx5DVDCInitAttr",
    "Mlx5DVQPInitAttr", "Mlx5QP", "Mlx5DVCQInitAttr", "Mlx5CQ", "Mlx5VAR", "Mlx5PP", "Mlx5UAR", "Mlx5DmOpAddr",
    "WqeSeg", "WqeCtrlSeg", "WqeDataSeg", "Wqe", "Mlx5UMEM", "Mlx5Cqe64", "Mlx5DevxMsiVector", "Mlx5DevxEq",
    "Mlx5DevxCmdComp"))


def context_flags_to_str(flags):
    return _vendor.bitmask_to_str(flags, {
        dve.MLX5DV_CONTEXT_FLAGS_CQE_V1: 'CQE v1',
        dve.MLX5DV_CONTEXT_FLAGS_MPW_ALLOWED: 'Multi packet WQE allowed',
        dve.MLX5DV_CONTEXT_FLAGS_ENHANCED_MPW: 'Enhanced multi packet WQE',
        dve.MLX5DV_CONTEXT_FLAGS_CQE_128B_COMP: 'Support CQE 128B compression',
        dve.MLX5DV_CONTEXT_FLAGS_CQE_128B_PAD: 'Support CQE 128B padding',
        dve.MLX5DV_CONTEXT_FLAGS_PACKET_BASED_CREDIT_MODE: 'Support packet based credit mode (in RC QP)'})


def cqe_comp_to_str(cqe):
    return _vendor.bitmask_to_str(cqe, {
        dve.MLX5DV_CQE_RES_FORMAT_HASH: 'with hash',
        dve.MLX5DV_CQE_RES_FORMAT_CSUM: 'with RX checksum CSUM',
        dve.MLX5DV_CQE_RES_FORMAT_CSUM_STRIDX: 'with stride index'})
