"""Every pyverbs module and name rdma-core's test suite imports exists in
softrdma's pyverbs (read from the suite when it is on this machine, else a
fixed list taken from rdma-core 44's tests), and the objects softrdma's
device lacks fail as on rxe (EOPNOTSUPP, pyverbs' messages) through a real
daemon."""

from __future__ import annotations

import ast
import collections
import glob
import gzip
import importlib
import os
import subprocess
import sys

import pytest

from daemon_helpers import daemon_in_shm

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.environ.get("RDMA_CORE_SUITE", "/work/rdma-core-suite/x")

#: what rdma-core 44's tests import at module level that softrdma once lacked
FIXED = {
    "pyverbs.xrcd": {"XRCD", "XRCDInitAttr"},
    "pyverbs.wq": {"WQInitAttr", "WQAttr", "WQ", "RwqIndTableInitAttr", "RwqIndTable", "RxHashConf"},
    "pyverbs.spec": {"EthSpec", "Ipv4ExtSpec", "Ipv6Spec", "TcpUdpSpec"},
    "pyverbs.flow": {"FlowAttr", "Flow"},
    "pyverbs.dmabuf": {"DmaBuf"},
    "pyverbs.dma_util": {"udma_to_dev_barrier", "udma_from_dev_barrier", "mmio_write32_as_be",
                         "mmio_write64_as_be"},
    "pyverbs.pd": {"PD", "ParentDomain", "ParentDomainInitAttr", "ParentDomainContext"},
    "pyverbs.srq": {"SRQ", "SrqInitAttr", "SrqInitAttrEx", "SrqAttr", "OpsWr"},
    "pyverbs.mem_alloc": {"mmap", "munmap", "free", "posix_memalign", "writebe32", "read64", "MAP_ANONYMOUS_",
                          "MAP_PRIVATE_", "MAP_HUGETLB_"},
    "pyverbs.enums": {"IBV_XRCD_INIT_ATTR_FD", "IBV_XRCD_INIT_ATTR_OFLAGS", "IBV_SRQT_XRC", "IBV_SRQT_TM",
                      "IBV_WQT_RQ", "IBV_WQS_RDY", "IBV_RX_HASH_FUNC_TOEPLITZ", "IBV_FLOW_SPEC_TCP",
                      "IBV_REREG_MR_CHANGE_ACCESS", "IBV_GID_TYPE_SYSFS_ROCE_V2", "IBV_TMH_EAGER",
                      "IBV_WC_TM_NO_TAG", "IBV_QPT_DRIVER", "_IBV_ALLOCATOR_USE_DEFAULT",
                      "_IBV_ADVISE_MR_ADVICE_PREFETCH", "_IBV_DEVICE_RAW_SCATTER_FCS"},
    "pyverbs.providers.mlx5.mlx5dv": {"Mlx5Context", "Mlx5DVContextAttr", "Mlx5QP", "Mlx5DVQPInitAttr",
                                      "Mlx5CQ", "Mlx5DVCQInitAttr", "Wqe", "WqeCtrlSeg", "WqeDataSeg",
                                      "context_flags_to_str", "cqe_comp_to_str"},
    "pyverbs.providers.mlx5.mlx5_enums": {"MLX5DV_CONTEXT_FLAGS_DEVX", "MLX5_SEND_WQE_BB",
                                          "MLX5DV_FLOW_TABLE_TYPE_NIC_RX_", "_MLX5DV_UAR_ALLOC_TYPE_BF"},
    "pyverbs.providers.mlx5.mlx5_vfio": {"Mlx5VfioAttr", "Mlx5VfioContext"},
    "pyverbs.providers.mlx5.mlx5dv_crypto": {"Mlx5CryptoLoginAttr", "Mlx5DEK"},
    "pyverbs.providers.mlx5.mlx5dv_flow": {"Mlx5FlowMatcher", "Mlx5FlowMatchParameters"},
    "pyverbs.providers.mlx5.mlx5dv_mkey": {"Mlx5Mkey", "Mlx5MrInterleaved"},
    "pyverbs.providers.mlx5.mlx5dv_objects": {"Mlx5DvObj"},
    "pyverbs.providers.mlx5.mlx5dv_sched": {"Mlx5dvSchedAttr", "Mlx5dvSchedNode", "Mlx5dvSchedLeaf"},
    "pyverbs.providers.mlx5.dr_action": {"DrActionQp", "DrActionModify"},
    "pyverbs.providers.mlx5.dr_domain": {"DrDomain"},
    "pyverbs.providers.mlx5.dr_matcher": {"DrMatcher"},
    "pyverbs.providers.mlx5.dr_rule": {"DrRule"},
    "pyverbs.providers.mlx5.dr_table": {"DrTable"},
    "pyverbs.providers.efa.efadv": {"EfaContext", "EfaCQ", "EfaDVCQInitAttr", "EfaQPInitAttr", "SRDQPEx",
                                    "dev_cap_to_str"},
    "pyverbs.providers.efa.efa_enums": {"EFADV_QP_DRIVER_TYPE_SRD", "EFADV_WC_EX_WITH_SGID"},
}


def suite_dir() -> str | None:
    for d in (os.path.join(SUITE, "usr/share/doc/rdma-core/tests"), os.path.join(SUITE, "tests"), SUITE):
        if glob.glob(os.path.join(d, "base.py*")):
            return d
    return None


def suite_imports(d: str) -> dict[str, set[str]]:
    """module -> names, from the suite's ``from pyverbs.X import ...`` and
    the attributes it reads of an ``import pyverbs.X as y`` alias."""
    need: dict[str, set[str]] = collections.defaultdict(set)
    for f in glob.glob(os.path.join(d, "*.py")) + glob.glob(os.path.join(d, "*.py.gz")):
        text = gzip.open(f, "rt").read() if f.endswith(".gz") else open(f).read()
        tree = ast.parse(text)
        aliases = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("pyverbs"):
                need[n.module].update(a.name for a in n.names)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.startswith("pyverbs"):
                        need[a.name]
                        aliases[a.asname or a.name] = a.name
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases \
                    and not n.attr.startswith("__") and n.attr != "args":     # ``e.args``: an exception named e
                need[aliases[n.value.id]].add(n.attr)
    return need


def missing(need: dict[str, set[str]]) -> list[str]:
    out = []
    for mod, names in sorted(need.items()):
        try:
            m = importlib.import_module("softrdma." + mod)
        except ImportError as ex:
            out.append(f"{mod}: {ex}")
            continue
        out += [f"{mod}.{n}" for n in sorted(names) if not hasattr(m, n)]
    return out


def test_fixed_list_of_suite_imports_exists():
    assert missing(FIXED) == []


def test_every_suite_import_exists():
    d = suite_dir()
    if d is None:
        pytest.skip(f"rdma-core's tests are not at {SUITE} (RDMA_CORE_SUITE); the fixed list is checked instead")
    need = suite_imports(d)
    assert "pyverbs.xrcd" in need            # the parse found the suite's imports
    assert missing(need) == []


def test_shim_maps_every_module():
    """``import pyverbs.providers.mlx5.mlx5dv`` through ``softrdma run``'s
    pyverbs is softrdma's module."""
    from softrdma.pyverbs import MODULES
    code = ("import importlib, sys\nfrom softrdma.pyverbs import MODULES\n"
            "for n in MODULES:\n"
            "    ours = importlib.import_module('softrdma.pyverbs.' + n)\n"
            "    assert importlib.import_module('pyverbs.' + n) is ours, n\n"
            "import pyverbs.providers.mlx5.mlx5_enums as dve\nprint(dve.MLX5_SEND_WQE_BB)\n")
    shim = os.path.join(os.path.dirname(importlib.import_module("softrdma").__file__), "shim")
    env = {**os.environ, "PYTHONPATH": shim + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "64"
    assert "providers.mlx5.mlx5dv" in MODULES


def test_values_of_vendor_headers():
    from softrdma.pyverbs import enums as e
    from softrdma.pyverbs.providers.efa import efa_enums
    from softrdma.pyverbs.providers.mlx5 import mlx5_enums as dve
    assert (e.IBV_SRQT_XRC, e.IBV_WC_TM_NO_TAG, e.IBV_QPT_DRIVER, e.IBV_FLOW_SPEC_UDP) == (1, 134, 0xff, 0x41)
    assert e.IBV_DEVICE_MEM_WINDOW == 1 << 17 and e._IBV_ALLOCATOR_USE_DEFAULT == 2 ** 64 - 1
    assert (dve.MLX5_SEND_WQE_BB, dve.MLX5DV_CONTEXT_FLAGS_DEVX, dve.MLX5_OPCODE_SEND) == (64, 1, 10)
    assert efa_enums.EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID == 4


def test_pure_helpers():
    from softrdma.pyverbs import dma_util, mem_alloc
    from softrdma.pyverbs.providers.efa.efadv import dev_cap_to_str
    from softrdma.pyverbs.pyverbs_error import PyverbsUserError
    from softrdma.pyverbs.wq import RwqIndTableInitAttr, RxHashConf
    a = mem_alloc.posix_memalign(64, 64)
    assert a % 64 == 0
    mem_alloc.writebe32(a, 0x01020304)
    dma_util.mmio_write64_as_be(a + 8, 0x1122334455667788)
    assert mem_alloc.read32(a) == 0x04030201 and mem_alloc.read64(a, 8) == 0x8877665544332211
    mem_alloc.free(a)
    assert dev_cap_to_str(5) == "RDMA Read, CQ entries with source GID (5)"
    with pytest.raises(PyverbsUserError, match="Length of rx_hash_key not equal"):
        RxHashConf(rx_hash_key_len=3, rx_hash_key=[1, 2])
    with pytest.raises(PyverbsUserError, match=r"Requested table size \(2\) is smaller than the number of wqs \(3\)"):
        RwqIndTableInitAttr(log_ind_tbl_size=1, wqs_list=[1, 2, 3])


def test_dmabuf_fails_as_rdma_core_does():
    import errno
    from softrdma.pyverbs.dmabuf import DmaBuf
    from softrdma.pyverbs.pyverbs_error import PyverbsRDMAError
    with pytest.raises(PyverbsRDMAError, match="Failed to allocate dmabuf of size 1 on gpu 0") as ei:
        DmaBuf(1, gpu=0)
    want = errno.EOPNOTSUPP if os.path.exists("/dev/dri/renderD128") else errno.ENOENT
    if os.path.exists("/dev/dri/renderD128") and not os.access("/dev/dri/renderD128", os.R_OK | os.W_OK):
        want = errno.EACCES
    assert ei.value.error_code == want


def test_unimplemented_objects_fail_with_eopnotsupp_through_a_daemon():
    with daemon_in_shm("pvmod") as d:
        prog = os.path.join(HERE, "pyverbs_programs", "unsupported.py")
        out = subprocess.run([sys.executable, "-m", "softrdma", "run", "--no-sysfs", "--", sys.executable, prog],
                             env={**d.env}, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.split("\n")
    for what in ("Mlx5QP",
                 "query_efa_device"):
        assert f"EOPNOTSUPP {what}" in lines, out.stdout
    assert out.stdout.strip().endswith("OK unsupported")
