from ..verbs.addr import AH, GID, AHAttr, GlobalRoute  # noqa: F401
