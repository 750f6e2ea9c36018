"""pyverbs.base: the common base class and the errno helper."""

from ..verbs.errors import PyverbsRDMAErrno, PyverbsRDMAError  # noqa: F401
from ..verbs.wr import inc_rkey  # noqa: F401


class PyverbsObject:
    def __init__(self):
        self.logger = None


class PyverbsCM(PyverbsObject):
    pass

