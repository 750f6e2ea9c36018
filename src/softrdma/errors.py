"""The one errno mapping: verb-level failures carry the errno libibverbs
returns for the same failure (EINVAL for a bad transition or attribute,
ENOMEM for a full queue, EOPNOTSUPP for what softrdma does not do).

``softrdma.pyverbs`` re-raises these as ``PyverbsRDMAError(msg, errno)``.
"""

import errno as _errno


class VerbsError(OSError):
    """A verb failed; ``.errno`` is the errno libibverbs would return."""

    def __init__(self, err: int, msg: str):
        super().__init__(err, msg)

    def __str__(self) -> str:
        return f"{self.strerror} [errno {self.errno}: {_errno.errorcode.get(self.errno, '?')}]"


def einval(msg: str) -> VerbsError:
    return VerbsError(_errno.EINVAL, msg)


def enomem(msg: str) -> VerbsError:
    return VerbsError(_errno.ENOMEM, msg)


def eopnotsupp(msg: str) -> VerbsError:
    return VerbsError(_errno.EOPNOTSUPP, msg)
