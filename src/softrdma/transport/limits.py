"""The requester's fixed limits (rxe's values), shared by the engines.

* MAX_UNACKED_PSNS -- at most this many PSNs sent and not acknowledged
  (rxe's RXE_MAX_UNACKED_PSNS): the ceiling of the go-back window;
* RUN_UNACKED_PSNS -- the ceiling for a QP whose packets leave through a
  device's socket as runs (``QP.enable_runs``): 512 PSNs, 2 MiB at RoCE MTU
  4096, which the peer's socket buffer (4 MiB) holds.  rxe's 128 is its own
  requester's limit, not something its responder asks of a peer; with the
  per-packet cost down to the kernel's, the 128-PSN window left the sender
  idle ~20 % of the time waiting for ACKs (docs/PERFORMANCE.md);
* MAX_PKT_PER_ACK -- an AckReq at least every this many packets;
* MIN_CWND -- the go-back window never shrinks below this (requester.py).
"""

MAX_UNACKED_PSNS = 128
RUN_UNACKED_PSNS = 512
MAX_PKT_PER_ACK = 64
MIN_CWND = 16.0
