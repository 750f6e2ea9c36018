"""pyverbs.srq: SRQ, its attributes, the extended init attributes and tag
matching's OpsWr (pyverbs/srq.pyx).

``SRQ(pd, SrqInitAttr)`` is softrdma's basic SRQ (verbs.srq).
``SRQ(ctx, SrqInitAttrEx)`` is ibv_create_srq_ex: a basic SRQ on a PD is
created as ibv_create_srq_ex creates it (through ibv_create_srq); an XRC
SRQ (IBV_SRQT_XRC) on the attributes' PD, XRC domain and CQ; a
tag-matching SRQ (IBV_SRQT_TM: PD, CQ and TM in comp_mask, an extended CQ,
max_num_tags and max_ops within tm_caps -- else EINVAL, as mlx5 and the
kernel) is verbs.srq's with its tag list in the device."""

import errno

from ..enums import (IBV_OPS_SIGNALED, IBV_SRQ_INIT_ATTR_CQ, IBV_SRQ_INIT_ATTR_PD, IBV_SRQ_INIT_ATTR_TM,
                     IBV_SRQ_INIT_ATTR_TYPE, IBV_SRQ_INIT_ATTR_XRCD, IBV_SRQT_BASIC, IBV_SRQT_TM, IBV_SRQT_XRC,
                     IBV_WR_TAG_ADD)
from ..verbs.cqex import CQEX
from ..verbs.errors import PyverbsRDMAError
from ..verbs.srq import SRQ as _BasicSRQ
from ..verbs.srq import SrqAttr, SrqInitAttr
from ._unsupported import not_supported


class SrqInitAttrEx:
    """ibv_srq_init_attr_ex: the SRQ's sizes plus comp_mask
    (IBV_SRQ_INIT_ATTR_*), srq_type, pd, xrcd, cq and the TM caps."""

    def __init__(self, max_wr=100, max_sge=1, srq_limit=0):
        self.max_wr = max_wr
        self.max_sge = max_sge
        self.srq_limit = srq_limit
        self.comp_mask = 0
        self.srq_type = IBV_SRQT_BASIC
        self.pd = None
        self.xrcd = None
        self.cq = None
        self.max_num_tags = 0
        self.max_ops = 0


class SRQ(_BasicSRQ):
    def __init__(self, creator, attr):
        if creator is None or attr is None:
            raise TypeError("SRQ needs a creator (PD or Context) and its attributes")
        if not isinstance(attr, SrqInitAttrEx):
            super().__init__(creator, attr)
            return
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE and attr.srq_type == IBV_SRQT_TM:
            self._create_tm(attr)
            return
        if attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE and attr.srq_type == IBV_SRQT_XRC:
            self._create_xrc(attr)
            return
        basic = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE
        if attr.comp_mask & ~basic or (attr.comp_mask & IBV_SRQ_INIT_ATTR_TYPE and attr.srq_type != IBV_SRQT_BASIC):
            raise not_supported(f'Failed to create SRQ (errno is {errno})')
        if not attr.comp_mask & IBV_SRQ_INIT_ATTR_PD or attr.pd is None:
            raise PyverbsRDMAError(f'Failed to create SRQ (errno is {errno})', errno.EINVAL)
        super().__init__(attr.pd, SrqInitAttr(SrqAttr(attr.max_wr, attr.max_sge, attr.srq_limit)))

    def _create_xrc(self, attr):
        """ibv_create_srq_ex of IBV_SRQT_XRC: a PD, an XRC domain and a CQ,
        each named in comp_mask (the kernel's create_srq: EINVAL without)."""
        need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ
        if attr.comp_mask & need != need or attr.pd is None or attr.xrcd is None or attr.cq is None:
            raise PyverbsRDMAError('Failed to create SRQ (errno is 22)', errno.EINVAL)
        super().__init__(attr.pd, SrqInitAttr(SrqAttr(attr.max_wr, attr.max_sge, attr.srq_limit)),
                         xrcd=attr.xrcd, cq=attr.cq)


    def _create_tm(self, attr):
        need = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM
        if (attr.comp_mask & need != need or attr.pd is None or not isinstance(attr.cq, CQEX)
                or not attr.max_num_tags):
            # the kernel needs the PD, the CQ and the tag list's size; mlx5 an extended CQ
            raise PyverbsRDMAError(f'Failed to create SRQ (errno is {errno.EINVAL})', errno.EINVAL)
        super().__init__(attr.pd, SrqInitAttr(SrqAttr(attr.max_wr, attr.max_sge, attr.srq_limit)),
                         tm=(attr.cq, attr.max_num_tags, attr.max_ops))


class OpsWr:
    """ibv_ops_wr: a tag-matching list operation (IBV_WR_TAG_ADD/DEL/SYNC)."""

    def __init__(self, wr_id=0, opcode=IBV_WR_TAG_ADD, flags=IBV_OPS_SIGNALED, next_wr=None, unexpected_cnt=0,
                 recv_wr_id=0, num_sge=None, tag=0, mask=0, sg_list=None):
        self.wr_id = wr_id
        self.opcode = opcode
        self.flags = flags
        self.next_wr = next_wr
        self.unexpected_cnt = unexpected_cnt
        self.recv_wr_id = recv_wr_id
        self.num_sge = num_sge if num_sge is not None else len(sg_list or [])
        self.tag = tag
        self.mask = mask
        self.sg_list = list(sg_list or [])
        self.handle = 0              # ADD: the entry's handle (output); DEL: the entry to remove

    def close(self):
        self.sg_list = []
