"""pyverbs.enums: every libibverbs constant, flat (as pyverbs' enums.pxd)."""
from ..enums import *  # noqa: F401,F403
from ..enums import ibv_gid_type  # noqa: F401
