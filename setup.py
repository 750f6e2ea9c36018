"""The compiled parts: the data path's loops (softrdma.wire._fastpath) and the
fabric server's sendmmsg (softrdma.fabric._sendmmsg).

Everything else is in pyproject.toml.  The extension is optional: where it
cannot be built (no C compiler or Python headers) the install goes on and
softrdma runs its Python reference of the same loops (softrdma.wire.fastpath),
and the fabric server sends one datagram per system call.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("softrdma.wire._fastpath", ["src/softrdma/wire/_fastpath.c", "src/softrdma/wire/_vcrc.c"],
                             depends=["src/softrdma/wire/_vcrc.h"],
                             libraries=["z"], extra_compile_args=["-O2"], optional=True),
                   Extension("softrdma.wire._bitfields", ["src/softrdma/wire/_bitfields.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("softrdma.fabric._smpfast", ["src/softrdma/fabric/_smpfast.c"],
                             extra_compile_args=["-O2"], optional=True),
                   Extension("softrdma.fabric._sendmmsg", ["src/softrdma/fabric/_sendmmsg.c"],
                             extra_compile_args=["-O2"], optional=True)])
