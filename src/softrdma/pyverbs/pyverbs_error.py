from ..verbs.errors import PyverbsError, PyverbsRDMAError, PyverbsUserError  # noqa: F401
