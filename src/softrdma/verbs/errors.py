"""pyverbs' exceptions (pyverbs/pyverbs_error.py), same names and messages."""

import os


class PyverbsError(Exception):
    def __init__(self, msg, error_code=-1):
        super().__init__(msg)
        self._error_code = error_code

    @property
    def error_code(self):
        return self._error_code


#: the errno of the last failed verbs call in this process (libc's errno
#: after a failed ibv_* call): what PyverbsRDMAErrno reports
_last_errno = 0


class PyverbsRDMAError(PyverbsError):
    def __init__(self, msg, error_code=-1):
        global _last_errno
        if error_code != -1:
            _last_errno = error_code
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg, error_code)


class PyverbsUserError(PyverbsError):
    pass


def PyverbsRDMAErrno(msg: str) -> PyverbsRDMAError:
    """pyverbs.base.PyverbsRDMAErrno: an error for ``msg`` carrying the errno
    of the last failed verbs call (0 if none failed, as libc's errno)."""
    return PyverbsRDMAError(msg, _last_errno)
