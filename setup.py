"""The compiled part of the data path (softrdma.wire._fastpath).

Everything else is in pyproject.toml.  The extension is optional: where it
cannot be built (no C compiler or Python headers) the install goes on and
softrdma runs its Python reference of the same loops (softrdma.wire.fastpath).
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("softrdma.wire._fastpath", ["src/softrdma/wire/_fastpath.c"],
                             libraries=["z"], extra_compile_args=["-O2"], optional=True)])
