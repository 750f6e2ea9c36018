"""pyverbs.pd: PD, and the parent domain classes (pyverbs/pd.pyx).

``ParentDomainContext`` and ``ParentDomainInitAttr`` hold the user's
allocator callbacks and the PD; softrdma's device has no parent domains
yet, so ``ParentDomain`` fails as ibv_alloc_parent_domain does on rxe (no
provider op: EOPNOTSUPP) with pyverbs' message."""
from ..verbs.pd import PD  # noqa: F401
from ._unsupported import not_supported


class ParentDomainContext:
    """The pd_context of a parent domain: the PD and the Python alloc/free
    callbacks (``alloc(pd, pd_context, size, alignment, resource_type)``
    returns an address, 0 or e._IBV_ALLOCATOR_USE_DEFAULT)."""

    def __init__(self, pd, alloc_func, free_func, user_data=None):
        self.pd = pd
        self.p_alloc = alloc_func
        self.p_free = free_func
        self.user_data = user_data


class ParentDomainInitAttr:
    """ibv_parent_domain_init_attr: the PD, and the allocators when
    pd_context is given (comp_mask IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS
    | _PD_CONTEXT, as pyverbs sets them)."""

    def __init__(self, pd, pd_context=None, comp_mask: int = 0):
        if pd is None:
            raise TypeError("ParentDomainInitAttr needs a PD")
        self.pd = pd
        self.pd_context = pd_context
        self.comp_mask = int(comp_mask)          # rdma-core 64: more bits (ALLOW_CC_UNPROTECTED_ALLOC)
        if pd_context is not None:
            from ..enums import IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT
            self.comp_mask |= IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT


class ParentDomain(PD):
    def __init__(self, context, attr):
        if context is None or attr is None:
            raise TypeError("ParentDomain needs a Context and a ParentDomainInitAttr")
        raise not_supported("Failed to allocate Parent Domain")
