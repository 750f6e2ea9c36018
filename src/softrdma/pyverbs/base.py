"""pyverbs.base: the common base class and the errno helper."""

from ..verbs.errors import PyverbsRDMAError  # noqa: F401


class PyverbsObject:
    def __init__(self):
        self.logger = None


class PyverbsCM(PyverbsObject):
    pass


def inc_rkey(rkey: int) -> int:
    return (rkey & ~0xFF) | ((rkey + 1) & 0xFF)
