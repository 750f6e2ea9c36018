"""What softrdma does not implement (yet) fails as rxe fails it: creating
the object raises ``PyverbsRDMAError(<pyverbs' message>, EOPNOTSUPP)`` --
the errno the kernel's uverbs (or libibverbs, for a provider without the
verb) returns when the device lacks the verb -- so programs, and rdma-core's
tests, take their "not supported on this device" path."""

import errno

from ..verbs.errors import PyverbsRDMAError


def not_supported(msg: str) -> PyverbsRDMAError:
    """The error a verb softrdma's device does not have raises: pyverbs'
    message for the failed call, errno EOPNOTSUPP."""
    return PyverbsRDMAError(msg, errno.EOPNOTSUPP)


def unsupported(name: str, why: str = "not supported by softrdma", *, msg: str = ""):
    """A class whose construction fails with ``not_supported(msg)``
    (default message: ``"<name>: <why>"``)."""
    text = msg or f"{name}: {why}"

    class _Unsupported:
        def __init__(self, *args, **kwargs):
            raise not_supported(text)
    _Unsupported.__name__ = _Unsupported.__qualname__ = name
    return _Unsupported
