"""The requester's fixed limits (rxe's values), shared by the engines.

* MAX_UNACKED_PSNS -- at most this many PSNs sent and not acknowledged
  (rxe's RXE_MAX_UNACKED_PSNS): the ceiling of the go-back window;
* MAX_PKT_PER_ACK -- an AckReq at least every this many packets;
* MIN_CWND -- the go-back window never shrinks below this (requester.py).
"""

MAX_UNACKED_PSNS = 128
MAX_PKT_PER_ACK = 64
MIN_CWND = 16.0
