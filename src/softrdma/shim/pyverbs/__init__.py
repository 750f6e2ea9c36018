"""The ``pyverbs`` that ``softrdma pyverbs-path`` puts on PYTHONPATH: every
``pyverbs.X`` is ``softrdma.pyverbs.X``."""

import importlib
import sys

from softrdma.pyverbs import MODULES

for _name in MODULES:
    sys.modules[f"{__name__}.{_name}"] = importlib.import_module(f"softrdma.pyverbs.{_name}")
del _name
