from ..verbs.wr import SGE, RecvWR, SendWR  # noqa: F401
