from ..enums import *  # noqa: F401,F403
