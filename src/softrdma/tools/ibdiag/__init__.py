"""softrdma.tools.ibdiag: infiniband-diags 44 (ibnetdiscover, iblinkinfo, ibroute,
ibtracert, ibhosts/ibswitches/ibnodes, smpquery, perfquery, sminfo,
ibqueryerrors, ibping) as ibsim clients, and NVIDIA's ibdiagnet (``ibdiagnet``:
its stages and summary; ``ibdiagnet_checks``: the pure checks;
``ibdiagnet_files``: its report files).

Shared parts: ``common`` (ibdiag_common.c: options, usage, IBEXIT, address
resolution), ``rpc`` (the MAD transport: an ibsim client, LID-routed and
directed-route SMPs, PerfMgt GMPs), ``dump`` (libibmad's mad_dump_* text),
``discover`` (libibnetdisc's directed-route discovery, same node order).
One module per tool holds its output.  They work against the real
``ibsim`` and against ``softrdma fabric serve``.
"""
