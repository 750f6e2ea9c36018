"""Classes pyverbs has and softrdma does not (yet): they fail loudly."""

import errno

from ..verbs.errors import PyverbsRDMAError


def unsupported(name: str, why: str = "not supported by softrdma"):
    class _Unsupported:
        def __init__(self, *args, **kwargs):
            raise PyverbsRDMAError(f"{name}: {why}", errno.EOPNOTSUPP)
    _Unsupported.__name__ = _Unsupported.__qualname__ = name
    return _Unsupported
