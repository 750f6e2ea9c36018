"""softrdma.wire: RoCEv2 on the wire, as pure functions over bytes.

* ``opcodes`` -- the opcode table (one row per opcode, headers and meaning)
* ``headers`` -- BTH/RETH/AETH/AtomicETH/AtomicAckETH/DETH/ImmDt/IETH codecs, PSN math
* ``packet``  -- build/parse whole packets (and the CNP) from the table
* ``icrc``    -- IP/UDP headers, the ICRC as rxe computes it, verification
* ``pcap``    -- Ethernet/IP/UDP frames and pcap files for capture tools
* ``mad``     -- the common MAD header and the 256-byte MAD (ib_mad.h)
* ``cm``      -- the IB CM messages from one field table (ibta_vol1_c12.h)
* ``cma``     -- rdma_cm's service IDs and private-data header (cma.c)

No I/O, no clocks.  Untrusted input raises only ``WireError``.
"""

from .errors import WireError
from .headers import (
    AETH_ACK, AETH_ACK_UNLIMITED, AETH_NAK, AETH_NAK_INVALID_REQ, AETH_NAK_PSN_SEQ_ERROR,
    AETH_NAK_REM_ACC_ERR, AETH_NAK_REM_OP_ERR, AETH_RNR_NAK, AETH_TYPE_MASK, DEFAULT_PKEY,
    RNR_TIMER_US, bth_dqpn, psn_add, psn_diff,
)
from .icrc import ROCEV2_UDP_PORT, Ipv4Flow, Verdict, icrc, ipv4_header, ipv6_header, udp_header, udp_sport, verify
from .opcodes import OPCODE_TABLE, Opcode, OpInfo, opcode_info
from .packet import Packet, build, build_cnp, check, pad_count, parse, rx_check

__all__ = [
    "WireError", "Opcode", "OpInfo", "OPCODE_TABLE", "opcode_info", "Packet", "build", "build_cnp",
    "check", "rx_check", "parse", "pad_count", "icrc", "verify", "Verdict", "Ipv4Flow", "ipv4_header",
    "ipv6_header", "udp_header", "udp_sport", "ROCEV2_UDP_PORT", "psn_add", "psn_diff",
    "RNR_TIMER_US", "DEFAULT_PKEY", "bth_dqpn", "AETH_ACK", "AETH_ACK_UNLIMITED", "AETH_NAK", "AETH_RNR_NAK",
    "AETH_TYPE_MASK", "AETH_NAK_PSN_SEQ_ERROR", "AETH_NAK_INVALID_REQ", "AETH_NAK_REM_ACC_ERR",
    "AETH_NAK_REM_OP_ERR",
]
