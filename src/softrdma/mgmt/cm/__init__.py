"""The IB Communication Manager (IBA ch. 12), ib_core's cm.c, sans-IO.

One ``agent.CmAgent`` per port; the daemon (``device.rdma_cm``) feeds it
the CM MADs of QP1 and drains its MADs and events.  Split by job, as cm.c's
handlers group:

=================  =================================================================
``ids``            CmState, CmEventType, CmId (cm_id_private), CmEvent, OutMad
``agent``          CmAgent: the ID tables, destroy, sending, listen, receive dispatch
``request``        REQ, REP, RTU, COMM_EST, LAP/APR; ConnectParams, AcceptParams
``reject``         REJ and MRA
``disconnect``     DREQ, DREP
``sidr``           SIDR_REQ, SIDR_REP (UD service ID resolution)
``timers``         retried messages, timeouts, TIMEWAIT; cm_convert_to_ms, cm_ack_timeout
``init_qp_attr``   ib_cm_init_qp_attr: the QP attributes, as plain names
``counters``       ib_cm's sysfs counter groups
=================  =================================================================

Imports only ``softrdma.wire`` and ``softrdma.enums``.
"""
