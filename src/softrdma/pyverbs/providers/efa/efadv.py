"""pyverbs.providers.efa.efadv: EFA direct verbs.

``EfaContext`` opens the device as pyverbs' does (it is a Context);
querying it, and the EFA objects, fail with EOPNOTSUPP as efadv does on a
device that is not EFA."""

import errno

from ....verbs.device import Context
from ....verbs.errors import PyverbsRDMAError
from .. import _vendor
from .._vendor import other_vendor
from . import efa_enums as dve


def dev_cap_to_str(flags):
    return _vendor.bitmask_to_str(flags, {
        dve.EFADV_DEVICE_ATTR_CAPS_RDMA_READ: 'RDMA Read',
        dve.EFADV_DEVICE_ATTR_CAPS_RNR_RETRY: 'RNR Retry',
        dve.EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID: 'CQ entries with source GID'})


class EfaContext(Context):
    def query_efa_device(self):
        raise PyverbsRDMAError(f'Failed to query efa device {self.name}', errno.EOPNOTSUPP)


globals().update(other_vendor("EFA", "EfaDVDeviceAttr", "EfaDVAHAttr", "EfaAH", "SRDQP", "EfaQPInitAttr",
                              "SRDQPEx", "EfaDVCQInitAttr", "EfaCQ"))
# rdma-core 64's
globals().update(other_vendor("EFA", "EfaDVMRAttr", "EfaMR", "EfaDVSQDepthAttr", "EfaDVRQDepthAttr"))
