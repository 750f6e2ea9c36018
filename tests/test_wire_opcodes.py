"""The opcode table (softrdma.wire.opcodes) against an explicit, hand-written
expectation of IBA 9.2 / rxe_opcode.c, and against scapy.contrib.roce's
independent opcode list."""

from __future__ import annotations

import pytest

from softrdma import wire
from softrdma.wire import headers as H
from softrdma.wire import opcodes as O
from softrdma.wire.opcodes import OPCODE_TABLE, Opcode, opcode_info

# opcode: (name, {header: offset}, length (= payload offset), carries payload)
# Written out by hand (not derived from the module) so that an error in the
# module's offset computation cannot hide behind the same computation here.
EXPECTED = {
    # --- RC -----------------------------------------------------------------
    0x00: ("RC_SEND_FIRST", {}, 12, True),
    0x01: ("RC_SEND_MIDDLE", {}, 12, True),
    0x02: ("RC_SEND_LAST", {}, 12, True),
    0x03: ("RC_SEND_LAST_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x04: ("RC_SEND_ONLY", {}, 12, True),
    0x05: ("RC_SEND_ONLY_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x06: ("RC_RDMA_WRITE_FIRST", {"reth": 12}, 28, True),
    0x07: ("RC_RDMA_WRITE_MIDDLE", {}, 12, True),
    0x08: ("RC_RDMA_WRITE_LAST", {}, 12, True),
    0x09: ("RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x0A: ("RC_RDMA_WRITE_ONLY", {"reth": 12}, 28, True),
    0x0B: ("RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", {"reth": 12, "immdt": 28}, 32, True),
    0x0C: ("RC_RDMA_READ_REQUEST", {"reth": 12}, 28, False),
    0x0D: ("RC_RDMA_READ_RESPONSE_FIRST", {"aeth": 12}, 16, True),
    0x0E: ("RC_RDMA_READ_RESPONSE_MIDDLE", {}, 12, True),
    0x0F: ("RC_RDMA_READ_RESPONSE_LAST", {"aeth": 12}, 16, True),
    0x10: ("RC_RDMA_READ_RESPONSE_ONLY", {"aeth": 12}, 16, True),
    0x11: ("RC_ACKNOWLEDGE", {"aeth": 12}, 16, False),
    0x12: ("RC_ATOMIC_ACKNOWLEDGE", {"aeth": 12, "atmack": 16}, 24, False),
    0x13: ("RC_COMPARE_SWAP", {"atmeth": 12}, 40, False),
    0x14: ("RC_FETCH_ADD", {"atmeth": 12}, 40, False),
    0x16: ("RC_SEND_LAST_WITH_INVALIDATE", {"ieth": 12}, 16, True),
    0x17: ("RC_SEND_ONLY_WITH_INVALIDATE", {"ieth": 12}, 16, True),
    # IBA 1.5 (rxe_opcode.c): FLUSH is BTH, FETH, RETH; ATOMIC WRITE is BTH, RETH, 8 bytes
    0x1C: ("RC_FLUSH", {"feth": 12, "reth": 16}, 32, False),
    0x1D: ("RC_ATOMIC_WRITE", {"reth": 12}, 28, True),
    # --- UC -----------------------------------------------------------------
    0x20: ("UC_SEND_FIRST", {}, 12, True),
    0x21: ("UC_SEND_MIDDLE", {}, 12, True),
    0x22: ("UC_SEND_LAST", {}, 12, True),
    0x23: ("UC_SEND_LAST_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x24: ("UC_SEND_ONLY", {}, 12, True),
    0x25: ("UC_SEND_ONLY_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x26: ("UC_RDMA_WRITE_FIRST", {"reth": 12}, 28, True),
    0x27: ("UC_RDMA_WRITE_MIDDLE", {}, 12, True),
    0x28: ("UC_RDMA_WRITE_LAST", {}, 12, True),
    0x29: ("UC_RDMA_WRITE_LAST_WITH_IMMEDIATE", {"immdt": 12}, 16, True),
    0x2A: ("UC_RDMA_WRITE_ONLY", {"reth": 12}, 28, True),
    0x2B: ("UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", {"reth": 12, "immdt": 28}, 32, True),
    # --- UD -----------------------------------------------------------------
    0x64: ("UD_SEND_ONLY", {"deth": 12}, 20, True),
    0x65: ("UD_SEND_ONLY_WITH_IMMEDIATE", {"deth": 12, "immdt": 20}, 24, True),
    # --- RoCEv2 CNP: BTH + 16 reserved bytes ---------------------------------
    0x81: ("CNP", {}, 28, False),
    # --- XRC (IBA 9.8): requests carry the 4-byte XRCETH after the BTH --------
    0xA0: ("XRC_SEND_FIRST", {"xrceth": 12}, 16, True),
    0xA1: ("XRC_SEND_MIDDLE", {"xrceth": 12}, 16, True),
    0xA2: ("XRC_SEND_LAST", {"xrceth": 12}, 16, True),
    0xA3: ("XRC_SEND_LAST_WITH_IMMEDIATE", {"xrceth": 12, "immdt": 16}, 20, True),
    0xA4: ("XRC_SEND_ONLY", {"xrceth": 12}, 16, True),
    0xA5: ("XRC_SEND_ONLY_WITH_IMMEDIATE", {"xrceth": 12, "immdt": 16}, 20, True),
    0xA6: ("XRC_RDMA_WRITE_FIRST", {"xrceth": 12, "reth": 16}, 32, True),
    0xA7: ("XRC_RDMA_WRITE_MIDDLE", {"xrceth": 12}, 16, True),
    0xA8: ("XRC_RDMA_WRITE_LAST", {"xrceth": 12}, 16, True),
    0xA9: ("XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE", {"xrceth": 12, "immdt": 16}, 20, True),
    0xAA: ("XRC_RDMA_WRITE_ONLY", {"xrceth": 12, "reth": 16}, 32, True),
    0xAB: ("XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", {"xrceth": 12, "reth": 16, "immdt": 32}, 36, True),
    0xAC: ("XRC_RDMA_READ_REQUEST", {"xrceth": 12, "reth": 16}, 32, False),
    0xAD: ("XRC_RDMA_READ_RESPONSE_FIRST", {"aeth": 12}, 16, True),
    0xAE: ("XRC_RDMA_READ_RESPONSE_MIDDLE", {}, 12, True),
    0xAF: ("XRC_RDMA_READ_RESPONSE_LAST", {"aeth": 12}, 16, True),
    0xB0: ("XRC_RDMA_READ_RESPONSE_ONLY", {"aeth": 12}, 16, True),
    0xB1: ("XRC_ACKNOWLEDGE", {"aeth": 12}, 16, False),
    0xB2: ("XRC_ATOMIC_ACKNOWLEDGE", {"aeth": 12, "atmack": 16}, 24, False),
    0xB3: ("XRC_COMPARE_SWAP", {"xrceth": 12, "atmeth": 16}, 44, False),
    0xB4: ("XRC_FETCH_ADD", {"xrceth": 12, "atmeth": 16}, 44, False),
    0xB6: ("XRC_SEND_LAST_WITH_INVALIDATE", {"xrceth": 12, "ieth": 16}, 20, True),
    0xB7: ("XRC_SEND_ONLY_WITH_INVALIDATE", {"xrceth": 12, "ieth": 16}, 20, True),
}

HEADERS = ("deth", "xrceth", "feth", "reth", "atmeth", "aeth", "atmack", "immdt", "ieth")
HEADER_BYTES = {"deth": 8, "xrceth": 4, "feth": 4, "reth": 16, "atmeth": 28, "aeth": 4, "atmack": 8, "immdt": 4,
                "ieth": 4}


def test_expected_table_is_complete():
    # 21 RC (0x00-0x14) + 2 RC invalidate + FLUSH + ATOMIC WRITE + 12 UC + 2 UD + CNP + 23 XRC
    assert len(EXPECTED) == 63
    assert sorted(EXPECTED) == sorted(int(op) for op in Opcode)
    assert len(OPCODE_TABLE) == 256


@pytest.mark.parametrize("code", sorted(EXPECTED), ids=lambda c: f"0x{c:02x}")
def test_row(code):
    name, offsets, length, payload = EXPECTED[code]
    info = OPCODE_TABLE[code]
    assert info is not None
    assert info is opcode_info(code)
    assert info.opcode == code
    assert info.name == name == Opcode(code).name
    assert info.length == length
    assert info.has_payload is payload
    assert bool(info.mask & O.PAYLOAD_MASK) is payload
    for hdr in HEADERS:
        assert getattr(info, hdr) == offsets.get(hdr, -1), hdr
    # headers are contiguous, in IBA order, and end exactly at the payload
    at = 12
    for hdr in HEADERS:
        off = getattr(info, hdr)
        if off >= 0:
            assert off == at
            at += HEADER_BYTES[hdr]
    if code == Opcode.CNP:
        at += O.CNP_PAD_BYTES
    assert at == length
    assert info.transport == code & 0xE0


@pytest.mark.parametrize("code", [c for c in range(256) if c not in EXPECTED],
                         ids=lambda c: f"0x{c:02x}")
def test_unknown_opcodes_are_none(code):
    # RD (0x40-0x5f), reserved RC/UC/UD codes, 0x80, 0x82-0xff
    assert OPCODE_TABLE[code] is None
    assert opcode_info(code) is None


def test_spot_checks_from_the_spec():
    i = OPCODE_TABLE[Opcode.RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE]
    assert (i.reth, i.immdt, i.length) == (12, 28, 32)
    i = OPCODE_TABLE[Opcode.UD_SEND_ONLY_WITH_IMMEDIATE]
    assert (i.deth, i.immdt, i.length) == (12, 20, 24)
    i = OPCODE_TABLE[Opcode.RC_ATOMIC_ACKNOWLEDGE]
    assert (i.aeth, i.atmack, i.length) == (12, 16, 24)
    i = OPCODE_TABLE[Opcode.RC_COMPARE_SWAP]
    assert (i.atmeth, i.length) == (12, 40)
    i = OPCODE_TABLE[Opcode.RC_RDMA_READ_RESPONSE_MIDDLE]
    assert i.aeth == -1 and i.length == 12 and i.has_payload
    i = OPCODE_TABLE[Opcode.RC_SEND_LAST_WITH_INVALIDATE]
    assert (i.ieth, i.length) == (12, 16)
    for code in range(0x40, 0x60):
        assert OPCODE_TABLE[code] is None          # RD is not spoken
    for code in (0x15, 0x18, 0x19, 0x1F, 0x2C, 0x3F, 0x60, 0x63, 0x66, 0x7F, 0x80, 0x82, 0xFF):
        assert OPCODE_TABLE[code] is None


def test_opcode_info_masks_to_a_byte():
    assert opcode_info(0x100 | Opcode.RC_SEND_ONLY) is OPCODE_TABLE[Opcode.RC_SEND_ONLY]
    assert opcode_info(-1 & 0xFFFF) is None        # 0xff


def test_header_struct_sizes_match_table():
    assert H.BTH.size == O.BTH_BYTES == 12
    assert H.DETH.size == O.DETH_BYTES == 8
    assert H.RETH.size == O.RETH_BYTES == 16
    assert H.ATMETH.size == O.ATMETH_BYTES == 28
    assert H.AETH.size == O.AETH_BYTES == 4
    assert H.ATMACK.size == O.ATMACK_BYTES == 8
    assert H.IMMDT.size == O.IMMDT_BYTES == 4
    assert H.IETH.size == O.IETH_BYTES == 4
    assert H.FETH.size == O.FETH_BYTES == 4
    assert O.CNP_PAD_BYTES == 16 and O.ICRC_BYTES == 4


# --- the meaning bits ---------------------------------------------------------

def _kind(name: str) -> str:
    return name.split("_", 1)[1] if name != "CNP" else name


@pytest.mark.parametrize("code", sorted(EXPECTED), ids=lambda c: f"0x{c:02x}")
def test_meaning_bits(code):
    info = OPCODE_TABLE[code]
    m = info.mask
    name = info.name
    kind = _kind(name)
    if code == Opcode.CNP:
        assert m & O.CNP_MASK and m & O.CNP_PAD_MASK
        assert not m & (O.REQ_MASK | O.RESP_MASK | O.PAYLOAD_MASK)
        assert info.transport == O.IB_OPCODE_CNP
        return
    assert not m & (O.CNP_MASK | O.CNP_PAD_MASK)
    is_resp = kind.startswith("RDMA_READ_RESPONSE") or kind in ("ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE")
    assert bool(m & O.FLUSH_MASK) == (kind == "FLUSH") == (info.feth >= 0)
    assert bool(m & O.ATOMIC_WRITE_MASK) is (kind == "ATOMIC_WRITE")
    assert bool(m & O.RESP_MASK) is is_resp
    assert bool(m & O.REQ_MASK) is (not is_resp)
    assert bool(m & O.SEND_MASK) is kind.startswith("SEND")
    assert bool(m & O.WRITE_MASK) is kind.startswith("RDMA_WRITE")      # not ATOMIC_WRITE (rxe's masks)
    assert bool(m & O.READ_MASK) is kind.startswith("RDMA_READ")
    assert bool(m & O.ATOMIC_MASK) is (kind in ("COMPARE_SWAP", "FETCH_ADD", "ATOMIC_ACKNOWLEDGE"))
    assert bool(m & O.ACK_MASK) is (kind in ("ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE"))
    single = kind in ("RDMA_READ_REQUEST", "ACKNOWLEDGE", "ATOMIC_ACKNOWLEDGE",
                      "COMPARE_SWAP", "FETCH_ADD", "FLUSH", "ATOMIC_WRITE")
    first, middle = "_FIRST" in kind, "_MIDDLE" in kind
    last, only = "_LAST" in kind, "_ONLY" in kind
    assert bool(m & O.START_MASK) is (first or only or single)
    assert bool(m & O.MIDDLE_MASK) is middle
    assert bool(m & O.END_MASK) is (last or only or single)
    assert bool(m & O.IMMDT_MASK) == ("WITH_IMMEDIATE" in kind) == (info.immdt >= 0)
    assert bool(m & O.IETH_MASK) == ("WITH_INVALIDATE" in kind) == (info.ieth >= 0)
    assert bool(m & O.UD_MASK) == (info.transport == O.IB_OPCODE_UD) == (info.deth >= 0)
    assert bool(m & O.XRCETH_MASK) == (info.transport == O.IB_OPCODE_XRC and not is_resp) == (info.xrceth >= 0)


# rxe_opcode.c: which opcodes consume a receive WQE (RXE_RWR_MASK) and which
# complete a message at the responder (RXE_COMP_MASK).
RWR_KINDS = {"SEND_FIRST", "SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE", "RDMA_WRITE_LAST_WITH_IMMEDIATE",
             "RDMA_WRITE_ONLY_WITH_IMMEDIATE", "SEND_ONLY_WITH_INVALIDATE"}
COMP_KINDS = {"SEND_LAST", "SEND_LAST_WITH_IMMEDIATE", "SEND_ONLY", "SEND_ONLY_WITH_IMMEDIATE",
              "RDMA_WRITE_LAST_WITH_IMMEDIATE", "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
              "SEND_LAST_WITH_INVALIDATE", "SEND_ONLY_WITH_INVALIDATE"}


@pytest.mark.parametrize("code", sorted(c for c in EXPECTED if c != Opcode.CNP),
                         ids=lambda c: f"0x{c:02x}")
def test_rwr_and_comp_bits_as_rxe(code):
    info = OPCODE_TABLE[code]
    kind = _kind(info.name)
    assert bool(info.mask & O.RWR_MASK) is (kind in RWR_KINDS)
    assert bool(info.mask & O.COMP_MASK) is (kind in COMP_KINDS)


def test_op_constants_and_opcode_for():
    ops = {n[3:]: v for n, v in vars(O).items() if n.startswith("OP_")}
    assert len(ops) == 25
    for kind, low5 in ops.items():
        assert Opcode["RC_" + kind] == low5
        assert O.opcode_for(O.IB_OPCODE_RC, low5) == low5
        uc = O.opcode_for(O.IB_OPCODE_UC, low5)
        xrc = OPCODE_TABLE[O.opcode_for(O.IB_OPCODE_XRC, low5)]
        if low5 in (O.OP_FLUSH, O.OP_ATOMIC_WRITE):
            assert xrc is None                  # IBA 1.5's FLUSH and ATOMIC WRITE are RC's only here
        else:
            assert xrc.name == "XRC_" + kind
        if low5 <= O.OP_RDMA_WRITE_ONLY_WITH_IMMEDIATE:
            assert OPCODE_TABLE[uc].name == "UC_" + kind
        else:
            assert OPCODE_TABLE[uc] is None     # UC has no read/atomic/invalidate/flush
    assert O.opcode_for(O.IB_OPCODE_UD, O.OP_SEND_ONLY) == Opcode.UD_SEND_ONLY
    assert O.opcode_for(O.IB_OPCODE_UD, O.OP_SEND_ONLY_WITH_IMMEDIATE) == Opcode.UD_SEND_ONLY_WITH_IMMEDIATE
    assert OPCODE_TABLE[O.opcode_for(O.IB_OPCODE_UD, O.OP_SEND_FIRST)] is None


def test_package_exports():
    assert wire.OPCODE_TABLE is OPCODE_TABLE
    assert wire.Opcode is Opcode
    assert wire.opcode_info is opcode_info


# --- against scapy.contrib.roce (an independent opcode list) -------------------

def _scapy_opcodes() -> dict[int, str]:
    from scapy.contrib.roce import _bth_opcodes
    return dict(_bth_opcodes)


def test_scapy_opcode_numbers_and_names():
    scapy_ops = _scapy_opcodes()
    # sanity: scapy knows the 21 RC + 12 UC + 21 RD + 2 UD + CNP codes
    assert len(scapy_ops) >= 50
    checked = 0
    for code, name in scapy_ops.items():
        info = OPCODE_TABLE[code]
        if name.startswith(("RC_", "UC_", "UD_")) or name == "CNP":
            assert info is not None, f"scapy knows 0x{code:02x} {name}, softrdma does not"
            assert info.name == name, f"0x{code:02x}: scapy {name}, softrdma {info.name}"
            assert Opcode[name] == code
            checked += 1
        elif name.startswith("RD_"):
            assert info is None, f"RD opcode 0x{code:02x} {name} should be unsupported"
        else:                                     # pragma: no cover - new scapy classes
            pytest.fail(f"unexpected scapy opcode 0x{code:02x} {name}")
    assert checked >= 36
    # everything softrdma has is in scapy, except the two RC invalidate sends
    # and IBA 1.5's FLUSH / ATOMIC WRITE, which scapy's table predates
    missing = {int(op) for op in Opcode} - set(scapy_ops)
    missing -= {int(op) for op in Opcode if op.name.startswith("XRC_")}     # scapy has no XRC
    assert missing <= {Opcode.RC_SEND_LAST_WITH_INVALIDATE, Opcode.RC_SEND_ONLY_WITH_INVALIDATE,
                       Opcode.RC_FLUSH, Opcode.RC_ATOMIC_WRITE}
