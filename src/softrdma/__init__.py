"""softrdma: a software RDMA stack (RoCEv2 device, verbs, CM, tools) in Python.

Layers, each importing only the ones above it in this list:
``enums`` (libibverbs constants) <- ``wire`` (pure codecs) <- ``transport``
(sans-IO QP state machines) <- ``sim`` (deterministic link simulator) and,
later, ``device`` <- ``verbs``/``pyverbs`` <- ``cm``/``tools``/``fabric``.
"""

__version__ = "0.1.0"
