"""softrdma.sm: a subnet manager (``softrdma opensm``), opensm's algorithms in Python.

Sans-IO core: ``subnet`` (the SM's view, as opensm's osm_subn), ``lid_mgr``
(osm_lid_mgr), ``guid2lid`` (opensm's cache file), ``routing`` (minhop, updn,
ftree, with opensm's port selection), ``lft_dump`` (opensm-lfts.dump),
``checks`` (reachability, credit loops), ``discovery`` and ``sweep`` (MAD
exchanges as state machines that emit SMPs and consume responses, through a
``softrdma.mgmt.agent.MadAgent``).  Sockets live only in ``run``'s loop over
a ``softrdma.mgmt.umad`` port (an ibsim client); ``main`` is the CLI.
"""
