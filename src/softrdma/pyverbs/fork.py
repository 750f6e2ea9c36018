"""pyverbs.fork: fork_init, is_fork_initialized (pyverbs/fork.pyx)."""
from ..verbs.fork import fork_init, is_fork_initialized  # noqa: F401
