from ..verbs.pd import PD  # noqa: F401
from ._unsupported import unsupported

ParentDomain = unsupported("ParentDomain")
ParentDomainInitAttr = unsupported("ParentDomainInitAttr")
