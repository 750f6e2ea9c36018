"""`softrdma fabric show`: layout, text and PNG, offline and live."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from softrdma.fabric import show



def _write(tmp_path) -> str:
    out = str(tmp_path / "ft.net")
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "gen", "ft2", "--leaves", "4", "--spines", "2",
                        "--hosts-per-leaf", "16", "-o", out], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return out


def test_layout_puts_leaves_above_hosts_and_spines_above_leaves(tmp_path):
    from softrdma.fabric import topo
    snap = show.snapshot(topo.load(_write(tmp_path)))
    tier, x = show.layout(snap)
    names = {n[0]: i for i, n in enumerate(snap["nodes"])}
    assert tier[names["host0001"]] == 0 and tier[names["leaf001"]] == 1 and tier[names["spine001"]] == 2
    assert all(0 < v < 1 for v in x.values())
    # barycentric order: leaf001's hosts are the leftmost, so leaf001 is left of leaf004
    assert x[names["leaf001"]] < x[names["leaf004"]]


def test_png_offline(tmp_path):
    net = _write(tmp_path)
    png = str(tmp_path / "ft.png")
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "show", net, "--png", png, "--text"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    data = open(png, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    assert "tier 2 (2): spine001 spine002" in r.stdout and "links: 136 (Init 136)" in r.stdout


def test_live_state_after_link_down(tmp_path):
    net = _write(tmp_path)
    base = f"show{os.getpid()}"
    env = {**os.environ, "IBSIM_SOCKNAME": base}
    srv = subprocess.Popen([sys.executable, "-m", "softrdma", "fabric", "serve", net, "--no-console"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "link", "down", "spine001", "2",
                                "--sock", base], capture_output=True, text=True, timeout=30)
            if r.returncode == 0:
                break
            time.sleep(0.1)
        assert r.returncode == 0, r.stderr
        png = str(tmp_path / "live.png")
        r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "show", "--sock", base, "--text",
                            "--png", png, "--color", "load"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert "links: 136 (Down 1, Init 135)" in r.stdout
        assert '  Down   "leaf001"[18] <-> "spine001"[2]' in r.stdout.splitlines()
        assert open(png, "rb").read()[:4] == b"\x89PNG"
    finally:
        srv.terminate()
        srv.wait(10)


def test_bad_arguments():
    for argv, msg in ((["show"], "give TOPO.net or --sock"), (["show", "x.net"], "nothing to do"),
                      (["show", "x.net", "--text", "--sock", "y"], "give TOPO.net or --sock")):
        r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", *argv], capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 2 and msg in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run([sys.executable, "-m", "softrdma", "fabric", "show", "--sock", "nosuchserver", "--text"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1 and "no fabric server" in r.stderr and "Traceback" not in r.stderr
