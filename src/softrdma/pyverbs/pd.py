"""pyverbs.pd: PD, and the parent domain classes (pyverbs/pd.pyx):
ParentDomainContext (the alloc/free callables), ParentDomainInitAttr,
ParentDomain (verbs.pd says where the allocators' memory goes)."""
from ..verbs.pd import PD, ParentDomain, ParentDomainContext, ParentDomainInitAttr  # noqa: F401
