"""softrdma.device.sysfs: the tree's files against literal strings from the
kernel's show functions (drivers/infiniband/core/sysfs.c, uverbs_main.c,
rxe), the real rxe0 of ../shared/interop/rxe-vm (NOTES.md), the mlx5 tree of
the seed, and a faithful re-implementation of the parser node_exporter uses
(prometheus/procfs sysfs/class_infiniband.go)."""

from __future__ import annotations

import errno
import ipaddress
import os
import struct
import time
from pathlib import Path

import pytest

from softrdma.device.gid import GidTable
from softrdma.device.sysfs import (
    PMA_COUNTERS_EXT, SysfsTree, guid_str, rate_str, read_attr, rxe_device_attrs,
    rxe_pma_counters, softrdma_device_attrs,
)
from softrdma.transport.counters import RXE_HW_COUNTERS

MAC = "52:54:00:77:00:02"
ZERO = "0000:0000:0000:0000:0000:0000:0000:0000"

# rxe_hw_counters.c (6.x) rxe_counter_descs[], in order, written out by hand.
RXE_HW_NAMES = [
    "sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
    "rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred",
    "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
    "send_err", "link_downed", "rdma_sends", "rdma_recvs",
]
# The seed's mlx5_0 ports/1/counters listing (pma_attrs_ext), by hand.
SEED_COUNTERS = {
    "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
    "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets",
    "unicast_xmit_packets", "VL15_dropped",
}


def text(path: Path) -> str:
    return path.read_bytes().decode()


def make_rxe(root: Path, capacity: int):
    """The rxe-vm guest's rxe0 on eth0, as the kernel shows it."""
    tree = SysfsTree(root)
    tree.add_device("rxe0", **rxe_device_attrs(MAC, "eth0"))
    tree.set_port("rxe0", 1)
    tree.set_pkeys("rxe0", 1)
    gids = GidTable("eth0", capacity=capacity)
    gids.sync(MAC, [ipaddress.ip_address("10.77.0.2"),
                    ipaddress.ip_address("fe80::5054:ff:fe77:2")])
    tree.set_gids("rxe0", 1, gids)
    tree.update_counters("rxe0", 1, None, {n.name: 0 for n in RXE_HW_COUNTERS})
    return tree, gids


@pytest.fixture(scope="module")
def rxe_full(shm_path_module):
    """rxe0 with all 1024 GID slots, built once (on /dev/shm: thousands of
    small files); tests must not change it."""
    return make_rxe(shm_path_module, 1024)


@pytest.fixture
def rxe(tmp_path):
    """rxe0 with a 16-slot GID table (cheap to rebuild per test)."""
    return make_rxe(tmp_path, 16)


# -- device and port attributes ---------------------------------------------------

def test_rxe_device_files(rxe_full):
    tree, _ = rxe_full
    d = tree.root / "class" / "infiniband" / "rxe0"
    assert text(d / "node_type") == "1: CA\n"
    assert text(d / "node_guid") == "5054:00ff:fe77:0002\n"       # ibv_devinfo, NOTES
    assert text(d / "sys_image_guid") == "5054:00ff:fe77:0002\n"
    assert text(d / "fw_ver") == "\n"          # rxe has no get_dev_fw_str
    assert text(d / "node_desc") == "rxe\n"
    assert text(d / "parent") == "eth0\n"      # rxe's only driver attribute
    for absent in ("hca_type", "board_id", "hw_rev"):
        assert not (d / absent).exists()
    assert sorted(os.listdir(d / "ports")) == ["1"]
    assert (d / "node_desc").stat().st_mode & 0o777 == 0o644
    assert (d / "node_type").stat().st_mode & 0o777 == 0o444


def test_rxe_port_files(rxe_full):
    tree, _ = rxe_full
    p = tree.port_path("rxe0", 1)
    expect = {
        "state": "4: ACTIVE\n",
        "phys_state": "5: LinkUp\n",
        "rate": "2.5 Gb/sec (1X SDR)\n",      # NOTES: ibv_devinfo rate
        "lid": "0x0\n",
        "sm_lid": "0x0\n",
        "sm_sl": "0\n",
        "lid_mask_count": "0\n",
        "cap_mask": "0x00010000\n",           # IB_PORT_CM_SUP
        "link_layer": "Ethernet\n",
    }
    for name, want in expect.items():
        assert text(p / name) == want, name
    assert sorted(os.listdir(p / "pkeys")) == ["0"]
    assert text(p / "pkeys" / "0") == "0xffff\n"
    assert "counters" not in os.listdir(p)      # no process_mad in rxe <= 6.x


def test_other_states_and_attributes(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_device("mlx5_0", bytes.fromhex("b8cef60300a1b2c3"), 0xB8CEF60300A1B2C3,
                    "16.35.2000", "MT4119", "MT_0000000010", "0",
                    "s11 mlx5_0" + "x" * 80, 1)
    d = tree.device_path("mlx5_0")
    assert text(d / "node_guid") == "b8ce:f603:00a1:b2c3\n"
    assert text(d / "sys_image_guid") == "b8ce:f603:00a1:b2c3\n"
    assert text(d / "hca_type") == "MT4119\n"
    assert text(d / "board_id") == "MT_0000000010\n"
    assert text(d / "hw_rev") == "0\n"
    assert text(d / "fw_ver") == "16.35.2000\n"
    assert len(text(d / "node_desc")) == 65                  # "%.64s\n"
    tree.set_port("mlx5_0", 1, state=1, phys_state=3, rate=("EDR", 4), lid=0x1A,
                  sm_lid=0x1, lid_mask_count=2, cap_mask=0x2651E848,
                  link_layer="InfiniBand", sm_sl=3)
    p = tree.port_path("mlx5_0", 1)
    assert text(p / "state") == "1: DOWN\n"
    assert text(p / "phys_state") == "3: Disabled\n"
    assert text(p / "rate") == "100 Gb/sec (4X EDR)\n"
    assert text(p / "lid") == "0x1a\n"
    assert text(p / "sm_lid") == "0x1\n"
    assert text(p / "sm_sl") == "3\n"
    assert text(p / "lid_mask_count") == "2\n"
    assert text(p / "cap_mask") == "0x2651e848\n"
    assert text(p / "link_layer") == "InfiniBand\n"
    tree.set_port("mlx5_0", 1, state=9, phys_state=8)
    assert text(p / "state") == "9: UNKNOWN\n"
    assert text(p / "phys_state") == "8: <unknown>\n"
    tree.set_port("mlx5_0", 1, state=5, phys_state=7)
    assert text(p / "state") == "5: ACTIVE_DEFER\n"
    assert text(p / "phys_state") == "7: Phy Test\n"

    tree.add_device("sw0", 1, node_type=2)
    assert text(tree.device_path("sw0") / "node_type") == "2: switch\n"
    assert text(tree.device_path("sw0") / "node_guid") == "0000:0000:0000:0001\n"


@pytest.mark.parametrize("speed,width,want", [
    ("SDR", 1, "2.5 Gb/sec (1X SDR)"),
    ("SDR", 2, "5 Gb/sec (2X SDR)"),
    ("SDR", 12, "30 Gb/sec (12X SDR)"),
    ("DDR", 4, "20 Gb/sec (4X DDR)"),
    ("DDR", 12, "60 Gb/sec (12X DDR)"),
    ("QDR", 4, "40 Gb/sec (4X QDR)"),
    ("FDR10", 1, "10 Gb/sec (1X FDR10)"),
    ("FDR", 4, "56 Gb/sec (4X FDR)"),
    ("FDR", 1, "14 Gb/sec (1X FDR)"),
    ("EDR", 4, "100 Gb/sec (4X EDR)"),
    ("HDR", 4, "200 Gb/sec (4X HDR)"),
    ("NDR", 4, "400 Gb/sec (4X NDR)"),
    ("bogus", 1, "2.5 Gb/sec (1X SDR)"),       # "default to SDR for invalid rates"
])
def test_rate_str_is_rate_show(speed, width, want):
    assert rate_str(speed, width) == want


def test_guid_str_and_bad_input():
    assert guid_str(bytes.fromhex("505400fffe770002")) == "5054:00ff:fe77:0002"
    with pytest.raises(ValueError):
        guid_str(b"\x00" * 7)
    with pytest.raises(ValueError):
        rate_str("SDR", 3)


# -- GIDs -------------------------------------------------------------------------

def test_gid_files_match_the_real_rxe0(rxe_full):
    tree, _ = rxe_full
    p = tree.port_path("rxe0", 1)
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        assert sorted(os.listdir(p / sub), key=int) == [str(i) for i in range(1024)]
    # NOTES.md "rxe in the guest", literally
    assert text(p / "gids" / "0") == "fe80:0000:0000:0000:5054:00ff:fe77:0002\n"
    assert text(p / "gids" / "1") == "0000:0000:0000:0000:0000:ffff:0a4d:0002\n"
    for i in (0, 1):
        assert text(p / "gid_attrs" / "types" / str(i)) == "RoCE v2\n"
        assert text(p / "gid_attrs" / "ndevs" / str(i)) == "eth0\n"
    # free slots: the zero GID; types/ndevs exist but the read "fails"
    assert text(p / "gids" / "2") == ZERO + "\n"
    assert text(p / "gids" / "1023") == ZERO + "\n"
    for sub in ("types", "ndevs"):
        f = p / "gid_attrs" / sub / "2"
        assert f.exists() and f.stat().st_size == 0
        with pytest.raises(OSError) as ei:
            read_attr(f)
        assert ei.value.errno == errno.EINVAL
    assert read_attr(p / "gid_attrs" / "types" / "1") == "RoCE v2"


def test_the_guests_rxe_gids_script_sees_the_notes_table(rxe_full):
    """guest-files/usr/local/bin/rxe-gids: grep the non-zero gids, then cat
    type and ndev (errors to /dev/null)."""
    tree, _ = rxe_full
    d = tree.port_path("rxe0", 1)
    rows = []
    for name in sorted(os.listdir(d / "gids"), key=int):
        g = text(d / "gids" / name).rstrip("\n")
        if g == ZERO:
            continue
        t = text(d / "gid_attrs" / "types" / name).rstrip("\n")
        n = text(d / "gid_attrs" / "ndevs" / name).rstrip("\n")
        rows.append(f"{name:<4} {g:<40} {t:<8} {n}")
    assert rows == [
        "0    fe80:0000:0000:0000:5054:00ff:fe77:0002  RoCE v2  eth0",
        "1    0000:0000:0000:0000:0000:ffff:0a4d:0002  RoCE v2  eth0",
    ]


def test_set_gids_rewrites_only_changed_slots(rxe):
    tree, gids = rxe
    p = tree.port_path("rxe0", 1)
    assert tree.set_gids("rxe0", 1, gids) == 0
    ino = (p / "gids" / "0").stat().st_ino
    gids.sync(MAC, [ipaddress.ip_address("10.77.0.2"), ipaddress.ip_address("10.77.0.3")])
    assert tree.set_gids("rxe0", 1, gids) == 3              # one slot, three files
    assert text(p / "gids" / "2") == "0000:0000:0000:0000:0000:ffff:0a4d:0003\n"
    assert (p / "gids" / "0").stat().st_ino == ino          # untouched
    gids.sync(MAC, [ipaddress.ip_address("10.77.0.3")])     # 10.77.0.2 goes
    assert tree.set_gids("rxe0", 1, gids) == 3
    assert text(p / "gids" / "1") == ZERO + "\n"
    assert (p / "gid_attrs" / "types" / "1").stat().st_size == 0
    assert text(p / "gids" / "2") == "0000:0000:0000:0000:0000:ffff:0a4d:0003\n"


def test_set_gids_speed(tmp_path):
    """3072 files on first write; a no-change resync is cheap."""
    tree = SysfsTree(tmp_path)
    tree.add_device("rxe0", **rxe_device_attrs(MAC, "eth0"))
    tree.set_port("rxe0", 1)
    gids = GidTable("eth0")
    gids.sync(MAC, ["10.77.0.2"])
    t0 = time.perf_counter()
    assert tree.set_gids("rxe0", 1, gids) == 3 * 1024
    t1 = time.perf_counter()
    assert tree.set_gids("rxe0", 1, gids) == 0
    t2 = time.perf_counter()
    print(f"set_gids: first {1e3 * (t1 - t0):.0f} ms, unchanged {1e3 * (t2 - t1):.1f} ms")
    assert t1 - t0 < 10 and t2 - t1 < 1


def test_a_smaller_table_removes_the_extra_slots(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_device("d0", 1)
    tree.set_port("d0", 1)
    tree.set_gids("d0", 1, GidTable("eth0", capacity=8))
    tree.set_gids("d0", 1, GidTable("eth0", capacity=4))
    assert sorted(os.listdir(tree.port_path("d0", 1) / "gids")) == ["0", "1", "2", "3"]


def test_pkeys(tmp_path):
    tree = SysfsTree(tmp_path)
    tree.add_device("d0", 1)
    tree.set_port("d0", 1)
    tree.set_pkeys("d0", 1, [0xFFFF, 0x8001, 0x7FFF])
    p = tree.port_path("d0", 1) / "pkeys"
    assert [text(p / str(i)) for i in range(3)] == ["0xffff\n", "0x8001\n", "0x7fff\n"]
    tree.set_pkeys("d0", 1, [0xFFFF])
    assert os.listdir(p) == ["0"]
    with pytest.raises(ValueError):
        tree.set_pkeys("d0", 1, [0x10000])


# -- counters ---------------------------------------------------------------------

def test_rxe_hw_counters(rxe):
    tree, _ = rxe
    h = tree.port_path("rxe0", 1) / "hw_counters"
    assert [c.name for c in RXE_HW_COUNTERS] == RXE_HW_NAMES
    assert sorted(os.listdir(h)) == sorted(RXE_HW_NAMES + ["lifespan"])
    assert text(h / "lifespan") == "10\n"           # RDMA_HW_STATS_DEFAULT_LIFESPAN
    assert (h / "lifespan").stat().st_mode & 0o777 == 0o644
    tree.update_counters("rxe0", 1, None, {"sent_pkts": 12345, "duplicate_request": 2**64 - 1})
    assert text(h / "sent_pkts") == "12345\n"
    assert text(h / "duplicate_request") == "18446744073709551615\n"   # "%llu"
    with pytest.raises(ValueError):
        tree.update_counters("rxe0", 1, None, {"sent_pkts": -1})
    with pytest.raises(ValueError):
        tree.update_counters("rxe0", 1, None, {"lifespan": 5})
    with pytest.raises(ValueError):
        tree.update_counters("rxe0", 1, None, {"a/b": 5})


def test_pma_counters_table_and_rxe_values(rxe):
    tree, _ = rxe
    assert set(PMA_COUNTERS_EXT) == SEED_COUNTERS and len(PMA_COUNTERS_EXT) == 21
    vals = rxe_pma_counters(sent_bytes=4_000_003, rcvd_bytes=1027, sent_pkts=7,
                            rcvd_pkts=9, link_downed=300)
    assert vals == {"port_xmit_data": 1_000_000, "port_rcv_data": 256,
                    "port_xmit_packets": 7, "port_rcv_packets": 9, "link_downed": 255}
    tree.update_counters("rxe0", 1, vals)
    c = tree.port_path("rxe0", 1) / "counters"
    assert set(os.listdir(c)) == SEED_COUNTERS
    assert text(c / "port_xmit_data") == "1000000\n"
    assert text(c / "port_rcv_data") == "256\n"
    assert text(c / "link_downed") == "255\n"
    assert text(c / "symbol_error") == "0\n"
    assert text(c / "unicast_xmit_packets") == "0\n"
    # narrow counters saturate at all ones (IBA 16.1.3.5)
    tree.update_counters("rxe0", 1, {"local_link_integrity_errors": 99, "symbol_error": 70000,
                                     "port_xmit_wait": 2**40, "port_xmit_data": 2**63})
    assert text(c / "local_link_integrity_errors") == "15\n"
    assert text(c / "symbol_error") == "65535\n"
    assert text(c / "port_xmit_wait") == "4294967295\n"
    assert text(c / "port_xmit_data") == "9223372036854775808\n"
    with pytest.raises(ValueError):
        tree.update_counters("rxe0", 1, {"port_xmit_bytes": 1})


def test_counter_updates_write_only_what_moved(rxe):
    tree, _ = rxe
    hw = {n: 0 for n in RXE_HW_NAMES}
    first = tree.update_counters("rxe0", 1, rxe_pma_counters(), hw)
    assert first == 21                                 # the PMA table appears
    assert tree.update_counters("rxe0", 1, rxe_pma_counters(), hw) == 0
    hw["sent_pkts"] = 1
    assert tree.update_counters("rxe0", 1, rxe_pma_counters(sent_pkts=1), hw) == 2
    c = tree.port_path("rxe0", 1)
    ino = (c / "hw_counters" / "rcvd_pkts").stat().st_ino
    hw["sent_pkts"] = 2
    tree.update_counters("rxe0", 1, None, hw)
    assert (c / "hw_counters" / "rcvd_pkts").stat().st_ino == ino


def test_an_open_reader_keeps_the_old_value(rxe):
    tree, _ = rxe
    f = tree.port_path("rxe0", 1) / "hw_counters" / "sent_pkts"
    with open(f, "rb") as old:
        tree.update_counters("rxe0", 1, None, {"sent_pkts": 42})
        assert old.read() == b"0\n"          # the previous inode, whole
    assert text(f) == "42\n"


READER = r"""
import json, os, sys
dirs = json.loads(sys.argv[1])
stop = sys.argv[2]
problems, last, reads = [], {}, 0
while not os.path.exists(stop):
    for d, names in dirs.items():
        listed = set(os.listdir(d))
        if listed != set(names):
            problems.append(f"listing {d}: {sorted(listed ^ set(names))}")
        for n in ("port_xmit_packets", "port_xmit_data", "sent_pkts", "rcvd_pkts"):
            if n not in names:
                continue
            fd = os.open(os.path.join(d, n), os.O_RDONLY)
            try:
                raw = os.read(fd, 128)          # procfs' SysReadFile
            finally:
                os.close(fd)
            reads += 1
            if not raw.endswith(b"\n") or not raw[:-1].isdigit():
                problems.append(f"{n}: {raw!r}")
                continue
            v = int(raw)
            if v < last.get(d + n, 0):
                problems.append(f"{n} went back {last[d + n]} -> {v}")
            last[d + n] = v
print(json.dumps({"problems": problems[:20], "reads": reads}))
"""


@pytest.mark.slow                   # 800 rewrites under a reader process
def test_concurrent_readers_never_see_partial_values(rxe, tmp_path):
    """Another process lists and reads the counter directories while the
    writer updates them 800 times: every listing is exactly the expected
    names (no temporary files), every read is one complete decimal line of
    a value that was written, and values never go backwards."""
    import json
    import subprocess
    import sys

    tree, _ = rxe
    port = tree.port_path("rxe0", 1)
    hw = {n: 0 for n in RXE_HW_NAMES}
    tree.update_counters("rxe0", 1, rxe_pma_counters(), hw)
    dirs = {os.fspath(port / "counters"): sorted(SEED_COUNTERS),
            os.fspath(port / "hw_counters"): sorted(set(RXE_HW_NAMES) | {"lifespan"})}
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", READER, json.dumps(dirs), os.fspath(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        time.sleep(0.1)                       # let it start reading
        for i in range(1, 801):
            hw["sent_pkts"] = hw["rcvd_pkts"] = i * 1000
            tree.update_counters("rxe0", 1, rxe_pma_counters(sent_bytes=i * 4096, sent_pkts=i),
                                 hw)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    result = json.loads(out)
    assert result["problems"] == []
    assert result["reads"] > 50
    assert os.listdir(tree.root / ".staging") == []
    assert text(port / "hw_counters" / "sent_pkts") == "800000\n"


# -- infiniband_verbs, removal --------------------------------------------------------

def test_uverbs_entries(tmp_path):
    tree = SysfsTree(tmp_path)
    v = tmp_path / "class" / "infiniband_verbs"
    assert text(v / "abi_version") == "6\n"              # IB_USER_VERBS_ABI_VERSION
    tree.add_device("rxe0", **rxe_device_attrs(MAC, "eth0"))
    tree.add_device("rxe1", **rxe_device_attrs("52:54:00:77:00:03", "eth1"))
    assert text(v / "uverbs0" / "ibdev") == "rxe0\n"
    assert text(v / "uverbs0" / "abi_version") == "2\n"  # RXE_UVERBS_ABI_VERSION
    assert text(v / "uverbs1" / "ibdev") == "rxe1\n"
    tree.remove_device("rxe0")
    assert not tree.device_path("rxe0").exists() and not (v / "uverbs0").exists()
    tree.add_device("rxe2", **rxe_device_attrs("52:54:00:77:00:04", "eth2"))
    assert tree.uverbs_index("rxe2") == 0                # lowest free, like the ida
    assert text(v / "uverbs0" / "ibdev") == "rxe2\n"
    assert tree.devices() == ["rxe1", "rxe2"]


def test_device_net_lists_the_netdev_for_softrdma_devices_only(tmp_path):
    """device/net/<netdev> -> /sys/class/net/<netdev> for the daemon's
    devices (rdma-core's tests ``ls`` it to find the netdev); the kernel's
    rxe on a virtual netdev has no ``device`` link, and neither has a tree
    made with rxe_device_attrs."""
    tree = SysfsTree(tmp_path)
    tree.add_device("rxe0", **softrdma_device_attrs(MAC, "lo"))
    tree.add_device("rxe1", **rxe_device_attrs("52:54:00:77:00:03", "eth1"))
    net = tree.device_path("rxe0") / "device" / "net"
    assert sorted(os.listdir(net)) == ["lo"]
    assert os.readlink(net / "lo") == "/sys/class/net/lo"
    assert os.path.realpath(net / "lo") == os.path.realpath("/sys/class/net/lo")   # this netns' lo
    assert read_attr(net / "lo" / "ifindex") == "1"
    assert not (tree.device_path("rxe1") / "device").exists()
    tree.remove_device("rxe0")                  # the link goes, its target stays
    assert not net.exists() and os.path.exists("/sys/class/net/lo")
    tree.add_device("rxe0", **softrdma_device_attrs(MAC, "eth0"))
    assert os.listdir(tree.device_path("rxe0") / "device" / "net") == ["eth0"]
    with pytest.raises(ValueError):
        tree.add_device("rxe2", **softrdma_device_attrs(MAC, "../x"))
    assert not tree.device_path("rxe2").exists() and tree.devices() == ["rxe0", "rxe1"]


def test_remove_and_readd_rewrites_everything(rxe):
    tree, gids = rxe
    tree.remove_device("rxe0")
    assert os.listdir(tree.root / "class" / "infiniband") == []
    tree.add_device("rxe0", **rxe_device_attrs(MAC, "eth0"))
    tree.set_port("rxe0", 1)
    assert tree.set_gids("rxe0", 1, gids) == 3 * 16       # the cache was dropped
    assert text(tree.port_path("rxe0", 1) / "state") == "4: ACTIVE\n"


def test_errors(tmp_path):
    tree = SysfsTree(tmp_path)
    with pytest.raises(KeyError):
        tree.set_port("nope", 1)
    tree.add_device("d0", 1)
    with pytest.raises(FileExistsError):
        tree.add_device("d0", 1)
    with pytest.raises(KeyError):
        tree.set_gids("d0", 1, GidTable("eth0"))          # no set_port yet
    for bad in ("", ".", "..", "a/b"):
        with pytest.raises(ValueError):
            tree.add_device(bad, 1)


def test_a_stale_tree_from_an_earlier_run_is_replaced(tmp_path):
    stale = tmp_path / "class" / "infiniband" / "rxe0" / "ports" / "7"
    stale.mkdir(parents=True)
    tree = SysfsTree(tmp_path)
    tree.add_device("rxe0", **rxe_device_attrs(MAC, "eth0"))
    assert os.listdir(tree.device_path("rxe0") / "ports") == []


# -- node_exporter: prometheus/procfs sysfs/class_infiniband.go, re-implemented --------

class GoError(Exception):
    pass


def _underscore_ok(s: str) -> bool:
    """strconv.underscoreOK."""
    saw, i = "^", 0
    if s[:1] in ("-", "+"):
        s = s[1:]
    hexa = False
    if len(s) >= 2 and s[0] == "0" and s[1].lower() in "box":
        i, saw, hexa = 2, "0", s[1].lower() == "x"
    while i < len(s):
        c = s[i]
        if c.isdigit() or hexa and c.lower() in "abcdef":
            saw = "0"
        elif c == "_":
            if saw != "0":
                return False
            saw = "_"
        elif saw == "_":
            return False
        else:
            saw = "!"
        i += 1
    return saw != "_"


def go_parse_uint(s: str, base: int, bits: int = 64) -> int:
    """strconv.ParseUint (base 0: 0x/0o/0b prefixes, a leading 0 is octal,
    underscores between digits)."""
    if not s:
        raise GoError("invalid syntax")
    s0, base0 = s, base == 0
    if base == 0:
        base = 10
        if s[0] == "0":
            if len(s) >= 3 and s[1].lower() in "box":
                base = {"b": 2, "o": 8, "x": 16}[s[1].lower()]
                s = s[2:]
            else:
                base, s = 8, s[1:]
    n, underscores = 0, False
    for ch in s:
        if ch == "_" and base0:
            underscores = True
            continue
        if "0" <= ch <= "9":
            dig = ord(ch) - ord("0")
        elif "a" <= ch.lower() <= "z":
            dig = ord(ch.lower()) - ord("a") + 10
        else:
            raise GoError("invalid syntax")
        if dig >= base:
            raise GoError("invalid syntax")
        n = n * base + dig
    if underscores and not _underscore_ok(s0):
        raise GoError("invalid syntax")
    if n >= 1 << bits:
        raise GoError("value out of range")
    return n


def sys_read_file(path: Path) -> str:
    """util.SysReadFile: one read(2) of at most 128 bytes, TrimSpace."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 128).strip().decode()
    finally:
        os.close(fd)


def parse_state(s: str) -> tuple[int, str]:
    parts = s.split(":")
    if len(parts) != 2:
        raise GoError(f"failed to split {s} into 'ID: NAME'")
    return go_parse_uint(parts[0].strip(), 10, 32), parts[1].strip()


def parse_rate(s: str) -> int:
    """SplitAfterN(s, " ", 2); ParseFloat(.., 32); uint64(value * 125000000)."""
    i = s.find(" ")
    if i < 0:
        raise GoError(f"failed to split {s!r}")
    try:
        f32 = struct.unpack("f", struct.pack("f", float(s[:i + 1].strip())))[0]
    except ValueError:
        raise GoError("failed to convert") from None
    return int(f32 * 125000000)


PROCFS_COUNTERS = {
    "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
    "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
    "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_discards", "port_rcv_errors",
    "port_rcv_packets", "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
    "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets",
    "unicast_xmit_packets", "VL15_dropped",
}
PROCFS_HW_COUNTERS = {
    "duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
    "np_cnp_sent", "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence",
    "packet_seq_err", "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors",
    "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error",
    "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
    "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart",
    "roce_slow_restart_cnps", "roce_slow_restart_trans", "rp_cnp_handled",
    "rp_cnp_ignored", "rx_atomic_requests", "rx_dct_connect", "rx_icrc_encapsulated",
    "rx_read_requests", "rx_write_requests",
}
TIMES_FOUR = {"port_rcv_data", "port_xmit_data"}


def parse_counter_dir(path: Path, known: set[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for entry in sorted(os.scandir(path), key=lambda e: e.name):    # os.ReadDir
        if not entry.is_file(follow_symlinks=False):
            continue
        try:
            value = sys_read_file(Path(entry.path))
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.EACCES, errno.EPERM, errno.EOPNOTSUPP,
                           errno.EINVAL):
                continue
            raise
        if entry.name not in known:
            continue
        try:
            v = go_parse_uint(value, 0, 64)
        except GoError:
            if "N/A (no PMA)" in value:
                continue
            raise
        out[entry.name] = v * 4 if entry.name in TIMES_FOUR else v
    return out


def procfs_infiniband_class(sys_root: Path) -> dict:
    """FS.InfiniBandClass(): any error fails the whole scrape."""
    ibc = {}
    base = sys_root / "class" / "infiniband"
    for name in sorted(os.listdir(base)):
        path = base / name
        dev = {"FirmwareVersion": sys_read_file(path / "fw_ver"),   # required
               "BoardID": "", "HCAType": "", "Ports": {}}
        for f, key in (("board_id", "BoardID"), ("hca_type", "HCAType")):
            try:
                dev[key] = sys_read_file(path / f)
            except FileNotFoundError:
                pass
        for port in sorted(os.listdir(path / "ports")):
            num = go_parse_uint(port, 10, 32)
            pp = path / "ports" / port
            sid, sname = parse_state((pp / "state").read_text())
            pid, pname = parse_state((pp / "phys_state").read_text())
            ibp = {"State": sname, "StateID": sid, "PhysState": pname, "PhysStateID": pid,
                   "Rate": parse_rate((pp / "rate").read_text()),
                   "Counters": {}, "HwCounters": {}}
            if (pp / "counters").exists():
                ibp["Counters"] = parse_counter_dir(pp / "counters", PROCFS_COUNTERS)
            if (pp / "hw_counters").exists():
                ibp["HwCounters"] = parse_counter_dir(pp / "hw_counters", PROCFS_HW_COUNTERS)
            dev["Ports"][num] = ibp
        ibc[name] = dev
    return ibc


def test_procfs_helpers_match_procfs_own_tests():
    # TestParseSlowRate
    assert parse_rate("0 GB/sec") == 0
    assert parse_rate("2.5 Gb/sec (1X SDR)") == 312500000
    assert parse_rate("500 Gb/sec (4X HDR)") == 62500000000
    assert parse_state("4: ACTIVE\n") == (4, "ACTIVE")
    with pytest.raises(GoError):
        parse_state("4 ACTIVE")
    assert go_parse_uint("0", 0) == 0
    assert go_parse_uint("0x10", 0) == 16
    assert go_parse_uint("010", 0) == 8            # why we never write leading zeros
    assert go_parse_uint("1_000", 0) == 1000
    assert go_parse_uint("18446744073709551615", 0) == 2**64 - 1
    for bad in ("", "-1", "12a", "1__0", "_1", "1_", "18446744073709551616", "N/A (no PMA)",
                " 1"):
        with pytest.raises(GoError):
            go_parse_uint(bad, 0)


def test_node_exporter_parses_the_rxe_tree(rxe):
    tree, _ = rxe
    hw = {n: i for i, n in enumerate(RXE_HW_NAMES)}
    tree.update_counters("rxe0", 1, rxe_pma_counters(sent_bytes=4_000_000, rcvd_bytes=8_192,
                                                     sent_pkts=1000, rcvd_pkts=2), hw)
    got = procfs_infiniband_class(tree.root)
    dev = got["rxe0"]
    assert dev["FirmwareVersion"] == "" and dev["BoardID"] == "" and dev["HCAType"] == ""
    p = dev["Ports"][1]
    assert (p["State"], p["StateID"], p["PhysState"], p["PhysStateID"]) == \
        ("ACTIVE", 4, "LinkUp", 5)
    assert p["Rate"] == 312500000
    assert p["Counters"]["port_xmit_data"] == 4_000_000      # words * 4 = bytes
    assert p["Counters"]["port_rcv_data"] == 8_192
    assert p["Counters"]["port_xmit_packets"] == 1000
    assert p["Counters"]["port_rcv_packets"] == 2
    assert p["Counters"]["VL15_dropped"] == 0
    assert len(p["Counters"]) == 21
    assert p["HwCounters"] == {"duplicate_request": 2, "lifespan": 10}


def test_node_exporter_parses_rxe_without_counters_dir(rxe_full):
    tree, _ = rxe_full
    p = procfs_infiniband_class(tree.root)["rxe0"]["Ports"][1]
    assert p["Counters"] == {} and p["HwCounters"]["lifespan"] == 10


def test_node_exporter_reads_procfs_mlx4_fixture_values_from_our_tree(tmp_path):
    """The mlx4_0 port 1 of procfs' own fixture, rebuilt with this tree, parses
    to the values procfs' TestInfiniBandClass expects."""
    tree = SysfsTree(tmp_path)
    tree.add_device("mlx4_0", 0x0002C90300B3CFF0, None, "2.31.5050", "MT4099",
                    "SM_1141000001000", "0", "mlx4_0", 1)
    tree.set_port("mlx4_0", 1, rate=("QDR", 4), link_layer="InfiniBand")
    tree.update_counters("mlx4_0", 1, {"port_rcv_data": 2221223609,
                                       "port_xmit_data": 26509113295,
                                       "port_rcv_packets": 87169372,
                                       "port_xmit_packets": 85734114,
                                       "port_xmit_wait": 3599})
    dev = procfs_infiniband_class(tmp_path)["mlx4_0"]
    assert (dev["BoardID"], dev["FirmwareVersion"], dev["HCAType"]) == \
        ("SM_1141000001000", "2.31.5050", "MT4099")
    p = dev["Ports"][1]
    assert p["Rate"] == 5000000000
    c = p["Counters"]
    assert c["port_rcv_data"] == 8884894436
    assert c["port_xmit_data"] == 106036453180
    assert c["port_rcv_packets"] == 87169372
    assert c["port_xmit_packets"] == 85734114
    assert c["port_xmit_wait"] == 3599
    assert c["symbol_error"] == 0 and c["link_downed"] == 0


def test_empty_gid_attr_files_would_break_procfs_but_never_reach_it(rxe):
    """An empty file where procfs parses numbers fails the scrape (so the
    counter directories never have one); the empty gid_attrs files are
    outside what it reads."""
    tree, _ = rxe
    h = tree.port_path("rxe0", 1) / "hw_counters"
    (h / "duplicate_request").write_text("")
    with pytest.raises(GoError):
        procfs_infiniband_class(tree.root)
