"""pyverbs' exceptions (pyverbs/pyverbs_error.py), same names and messages."""

import os


class PyverbsError(Exception):
    def __init__(self, msg, error_code=-1):
        super().__init__(msg)
        self._error_code = error_code

    @property
    def error_code(self):
        return self._error_code


class PyverbsRDMAError(PyverbsError):
    def __init__(self, msg, error_code=-1):
        if error_code != -1:
            msg = f"{msg}. Errno: {error_code}, {os.strerror(error_code)}"
        super().__init__(msg, error_code)


class PyverbsUserError(PyverbsError):
    pass
