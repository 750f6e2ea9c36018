"""softrdma: a software RDMA stack (RoCEv2 device, verbs, CM, tools) in Python.

Layers, each importing only the ones before it (docs/architecture.md):
``enums``/``errors``/``uapi`` (libibverbs constants, what the library and
the daemon share) <- ``wire`` (pure codecs) <- ``transport`` (sans-IO QP
engines, the port layer) <- ``sim`` and ``device`` (the daemon);
``verbs``/``pyverbs`` (the library: uapi and wire only) <- ``tools``;
``mgmt`` (MADs, the IB CM), ``fabric`` and ``sm`` beside.
"""

__version__ = "0.1.0"
