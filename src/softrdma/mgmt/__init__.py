"""Management: the MAD agent (TIDs, send window, timeouts, retries, RMPP)
that the subnet manager, the diagnostics and the device's GSI share, the
ibsim client, and the IB communication manager (ib_core's cm.c).

Sans-IO apart from the ibsim client; beside ``fabric`` and ``sm``.
"""
