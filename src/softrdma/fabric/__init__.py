"""A simulated InfiniBand fabric that real subnet managers and diagnostics
can drive.

``model`` (nodes, ports, links, SM-programmed state), ``topo`` (ibsim .net
files), ``gen`` (fat trees, torus), ``agents`` (SMA and PMA), ``route``
(directed and LID routes, traps: ``Router.inject`` is the entry point) are
sans-IO; ``server`` speaks ibsim's client protocol over sockets and
``cli`` is ``softrdma fabric``.  Imports only ``softrdma.wire``.
"""
