"""pyverbs.cm_enums: librdmacm's constants -- in rdma-core cm_enums.pyx is a
symlink to librdmacm_enums.pyx, so this is that module under its other name
(rdma-core's tests import it as ``pyverbs.cm_enums``)."""
from .librdmacm_enums import *  # noqa: F401,F403
