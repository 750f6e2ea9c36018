"""The one counter registry: every count the transport keeps, by name.

``Counter``: the first names are rxe's hw_counters (rxe_hw_counters.c) in
its order, so the sysfs tree and ``rdma statistic`` can print them as the
kernel does; the rest are the per-QP counters ``rdma statistic qp`` shows
(iproute2 / mlx5 names) and the drop reasons of the receive path.  A QP
keeps a plain list indexed by ``Counter``; devices sum them.

``PortCounter``: what a port (``transport.port``) counts itself -- the
traffic its PMA reports, multicast, and the packets it drops before any QP
sees them.  ``FaultCounter``: what a fault injector (``transport.faults``)
did.  ``GsiDrop``: the MADs QP1 (``device.gsi``) drops, by reason.
``NetCounter``: what one UDP socket of a RoCE port (``device.net``) counts.
Each is a plain list too, indexed by its enum; ``as_dict`` shows one by name.
"""

from enum import IntEnum


class Counter(IntEnum):
    # rxe hw_counters, same names and order
    sent_pkts = 0
    rcvd_pkts = 1
    duplicate_request = 2
    out_of_seq_request = 3
    rcvd_rnr_err = 4
    send_rnr_err = 5
    rcvd_seq_err = 6
    ack_deferred = 7
    retry_exceeded_err = 8
    retry_rnr_exceeded_err = 9
    completer_retry_err = 10
    send_err = 11
    link_downed = 12
    rdma_sends = 13
    rdma_recvs = 14
    # per-QP extras
    sent_bytes = 15
    rcvd_bytes = 16
    local_ack_timeout_err = 17
    rx_read_requests = 18
    rx_write_requests = 19
    rx_atomic_requests = 20
    implied_nak_seq_err = 21
    resp_remote_access_errors = 22
    resp_invalid_request_errors = 23
    rnr_nak_retry_err = 24
    dropped_bad_state = 25
    dropped_bad_pkey = 26
    dropped_bad_qkey = 27
    dropped_bad_transport = 28
    dropped_ghost_response = 29
    retransmitted_pkts = 30
    # a packet for an RC/UC QP from an address that is not its peer's (or
    # to another of ours): dropped by the device before the transport, as
    # rxe's check_addr drops it (rxe counts none)
    dropped_bad_addr = 31
    # the requester stopped with the go-back window full: its next packet
    # waits for an ACK (once per requester run that ends so; rxe's
    # req.wait_psn, which it does not count)
    req_window_full = 32
    # congestion control (transport.dcqcn), mlx5's hw_counters names: CE-marked
    # packets received, CNPs sent for them (notification point); CNPs received
    # and acted on, or ignored because the reaction point is off for the
    # QP's priority (reaction point)
    np_ecn_marked_roce_packets = 33
    np_cnp_sent = 34
    rp_cnp_handled = 35
    rp_cnp_ignored = 36


#: rxe's hw_counters, the names sysfs shows under ports/1/hw_counters/.
RXE_HW_COUNTERS = tuple(c for c in Counter if c <= Counter.rdma_recvs)
#: mlx5's congestion counters, shown beside rxe's in hw_counters.
CONGESTION_COUNTERS = (Counter.np_ecn_marked_roce_packets, Counter.np_cnp_sent, Counter.rp_cnp_handled,
                       Counter.rp_cnp_ignored)
#: What a device's port shows under hw_counters (sysfs, ``rdma statistic``).
HW_COUNTERS = RXE_HW_COUNTERS + CONGESTION_COUNTERS
#: What an rdma counter (``rdma statistic qp``) shows for the QPs bound to
#: it: every per-QP count; link_downed is the port's, no QP ever counts it.
QP_COUNTERS = tuple(c for c in Counter if c is not Counter.link_downed)
N_COUNTERS = len(Counter)


def new_counters() -> list[int]:
    return [0] * N_COUNTERS


class PortCounter(IntEnum):
    # the port's traffic (rxe_ib_get_hw_stats' PMA view: port_xmit_packets ...)
    tx_packets = 0
    tx_bytes = 1
    rx_packets = 2
    rx_bytes = 3
    # PortCountersExtended's multicast counts
    multicast_xmit_packets = 4
    multicast_rcv_packets = 5
    # dropped before any QP: a bad ICRC, bad framing, no such QP
    rx_dropped_icrc = 6
    rx_dropped_wire = 7
    rx_dropped_unknown_qpn = 8
    # a QP whose processing raised (a fault of softrdma's own, never the
    # peer's or the application's to cause): the QP went to ERR, its
    # packets of that pass were dropped, the daemon carried on
    qp_internal_errors = 9


#: ``Device.traffic``: the counts ``rdma statistic`` and sysfs read, by name.
TRAFFIC = (PortCounter.tx_packets, PortCounter.tx_bytes, PortCounter.rx_packets, PortCounter.rx_bytes)
#: ``rx_dropped`` as ``rdma link show -d`` prints it: reason -> counter.
RX_DROPPED = (("icrc", PortCounter.rx_dropped_icrc), ("wire", PortCounter.rx_dropped_wire),
              ("unknown_qpn", PortCounter.rx_dropped_unknown_qpn))


class FaultCounter(IntEnum):
    lost = 0
    duplicated = 1
    reordered = 2
    delayed = 3
    corrupted = 4
    # the simulator's link: packets put on it, copies that came out
    sent = 5
    delivered = 6


#: What ``rdma link set ... faults`` reports (``fault_counters``), in order.
DEVICE_FAULT_COUNTERS = (FaultCounter.lost, FaultCounter.duplicated, FaultCounter.reordered,
                         FaultCounter.delayed, FaultCounter.corrupted)


class GsiDrop(IntEnum):
    """QP1's receive drops by reason (the daemon's ``links`` reply, gsi
    rx_dropped): not a UD SEND ONLY, a bad Q_Key (rxe check_keys), not
    256 bytes of MAD, a MAD header that does not parse."""
    opcode = 0
    qkey = 1
    length = 2
    mad = 3


class NetCounter(IntEnum):
    """One RoCEv2 UDP socket's counts (the daemon's ``links`` reply, net)."""
    tx_packets = 0
    tx_bytes = 1
    tx_errors = 2
    tx_gso_sends = 3         # sendmsg calls that carried several packets
    rx_packets = 4
    rx_bytes = 5
    rx_icrc_errors = 6
    rx_short = 7
    rx_gro_buffers = 8       # receives that carried several datagrams
    rx_id_recovered = 9      # IPv4 ICRCs checked by recovering the sender's IP ID
    rx_id_implausible = 10   # ... whose recovered ID that peer would not send: damaged (also in icrc errors)


def as_dict(cnt: list[int], counters) -> dict[str, int]:
    """The counts ``counters`` of the list ``cnt`` as {name: count}, in
    their order: enum members (named by their names), or (name, member)
    pairs for a name that is not the member's (``RX_DROPPED``)."""
    out = {}
    for c in counters:
        name, c = c if isinstance(c, tuple) else (c.name, c)
        out[name] = cnt[c]
    return out


def new_port_counters() -> list[int]:
    return [0] * len(PortCounter)


def new_fault_counters() -> list[int]:
    return [0] * len(FaultCounter)


def new_gsi_drops() -> list[int]:
    return [0] * len(GsiDrop)


def new_net_counters() -> list[int]:
    return [0] * len(NetCounter)
