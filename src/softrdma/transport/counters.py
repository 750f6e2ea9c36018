"""The one counter registry: every count the transport keeps, by name.

The first names are rxe's hw_counters (rxe_hw_counters.c) in its order, so
the sysfs tree and ``rdma statistic`` can print them as the kernel does;
the rest are the per-QP counters ``rdma statistic qp`` shows (iproute2 /
mlx5 names) and the drop reasons of the receive path.  A QP keeps a plain
list indexed by ``Counter``; devices sum them.
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


#: rxe's hw_counters, the names sysfs shows under ports/1/hw_counters/.
RXE_HW_COUNTERS = tuple(c for c in Counter if c <= Counter.rdma_recvs)
#: What an rdma counter (``rdma statistic qp``) shows for the QPs bound to
#: it: every per-QP count; link_downed is the port's, no QP ever counts it.
QP_COUNTERS = tuple(c for c in Counter if c is not Counter.link_downed)
N_COUNTERS = len(Counter)


def new_counters() -> list[int]:
    return [0] * N_COUNTERS
