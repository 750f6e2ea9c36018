"""A small Ceph-messenger-style message bus over softrdma's pyverbs API.

`header` (the fixed-size header), `frag` (fragmentation and reassembly),
`credits` (credit-based flow control), `inbound` (per-connection
in-order delivery and duplicate dropping), `pool` (the one registered chunk
pool), `messenger` (rdma_cm connections, the SRQ, the completion channel
and the polling thread).
"""
