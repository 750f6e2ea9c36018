"""Directories softrdma puts in front of PYTHONPATH (a ``pyverbs`` package)."""
