"""``softrdma rdma-core-tests`` on small suites written here, laid out as
rdma-core's ``tests/`` is (a ``run_tests.py`` that wraps unittest, an
``__init__.py`` that loads every ``test_*.py``, some of them gzipped as in
Debian's package): counts, skip reasons grouped, causes, exit status, --json,
a suite that does not load, a hang, and the one-line error without apt-get.
No network: the suites are local, the daemon is a private one."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from daemon_helpers import daemon_in_shm
from softrdma.tools.rdma_core_tests import parse

# rdma-core's own run_tests.py and __init__.py, reduced to what they do
RUN_TESTS = '''\
import argparse, os, sys, unittest
from importlib.machinery import SourceFileLoader
p = argparse.ArgumentParser()
p.add_argument('--dev')
p.add_argument('-v', '--verbose', dest='verbosity', action='store_const', const=2)
ns, rest = p.parse_known_args()
if ns.verbosity:
    rest += ['--verbose']
sys.argv[1:] = rest
tests = SourceFileLoader('tests', os.path.join(os.path.dirname(__file__), '__init__.py')).load_module()
unittest.main(module=tests)
'''
INIT = '''\
import importlib, os
__test_modules__ = [importlib.import_module('.' + fn[:-3], __name__)
                    for fn in sorted(os.listdir(os.path.dirname(__file__)))
                    if fn.startswith('test_') and fn.endswith('.py')]
def load_tests(loader, standard_tests, pattern):
    for mod in __test_modules__:
        standard_tests.addTests(loader.loadTestsFromModule(mod, pattern))
    return standard_tests
'''
TEST_A = '''\
import sys, unittest

class ATest(unittest.TestCase):
    def test_pass(self):
        print('a line the test prints', end='')     # mid-line, before unittest's "ok"
        self.assertEqual(2, 1 + 1)

    def test_fail(self):
        self.assertEqual(1, 2)

    def test_error(self):
        """A docstring: unittest prints its first line before the result."""
        raise AttributeError("'CQ' object has no attribute 'comp_channel'")

    @unittest.expectedFailure
    def test_expected(self):
        self.assertTrue(False)
'''
TEST_B = '''\
import sys, unittest

class BTest(unittest.TestCase):
    def test_not_mlx5_via_pyverbs(self):
        import pyverbs.device as d
        names = [dev.name.decode() for dev in d.get_device_list()]
        assert names and 'softrdma' in sys.modules, 'pyverbs is not softrdma\\'s'
        raise unittest.SkipTest('Device is not mlx5')

    def test_not_mlx5(self):
        raise unittest.SkipTest('Device is not mlx5')

    def test_cuda(self):
        self.skipTest('CUDA is not installed')
'''


def write_suite(root, modules: dict[str, str], gzipped=()) -> str:
    d = root / "tests"
    d.mkdir(parents=True)
    (d / "run_tests.py").write_text(RUN_TESTS)
    (d / "__init__.py").write_text(INIT)
    for name, text in modules.items():
        if name in gzipped:
            with gzip.open(d / f"{name}.gz", "wt") as f:
                f.write(text)
        else:
            (d / name).write_text(text)
    return str(d)


def softrdma(args, env, **kw):
    return subprocess.run([sys.executable, "-m", "softrdma", "rdma-core-tests", *args], env=env,
                          capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)


@pytest.fixture(scope="module")
def daemon():
    with daemon_in_shm("rct") as d:
        env = dict(d.env)
        env.pop("PYTHONPATH", None)         # pyverbs must come from softrdma run's shim
        yield env


def test_counts_skip_reasons_causes_exit_status_and_json(daemon, tmp_path):
    suite = write_suite(tmp_path, {"test_a.py": TEST_A, "test_b.py": TEST_B}, gzipped={"test_b.py"})
    out = softrdma(["--suite", suite, "--json", str(tmp_path / "r.json")], daemon)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "ran 7: 1 passed, 1 failed, 1 errors, 3 skipped, 1 expected failure" in out.stdout, out.stdout
    lines = out.stdout.splitlines()
    skips = lines[lines.index("skipped, by reason:") + 1:][:2]
    assert [s.split(None, 1) for s in skips] == [["2", "Device is not mlx5"], ["1", "CUDA is not installed"]]
    assert "  tests.test_a.ATest.test_fail: AssertionError: 1 != 2" in lines
    assert "  tests.test_a.ATest.test_error: AttributeError: 'CQ' object has no attribute 'comp_channel'" in lines
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["completed"] and data["ran"] == 7
    assert data["counts"] == {"passed": 1, "failed": 1, "error": 1, "skipped": 3, "expected failure": 1,
                              "unexpected success": 0}
    assert data["skipped_by_reason"] == [{"reason": "Device is not mlx5", "count": 2},
                                         {"reason": "CUDA is not installed", "count": 1}]
    assert [f["test"] for f in data["failures"]] == ["tests.test_a.ATest.test_fail"]
    assert [e["test"] for e in data["errors"]] == ["tests.test_a.ATest.test_error"]
    status = {t["test"]: t["status"] for t in data["tests"]}
    assert status["tests.test_b.BTest.test_not_mlx5_via_pyverbs"] == "skipped"     # pyverbs was softrdma's
    assert status["tests.test_a.ATest.test_pass"] == "passed"
    # the suite itself is untouched: gunzipped and compiled in a copy
    assert sorted(os.listdir(suite)) == ["__init__.py", "run_tests.py", "test_a.py", "test_b.py.gz"]


def test_pattern_selects_and_a_clean_run_exits_0(daemon, tmp_path):
    suite = write_suite(tmp_path, {"test_a.py": TEST_A, "test_b.py": TEST_B})
    out = softrdma(["--suite", str(tmp_path), "-k", "test_pass"], daemon)     # finds tests/ under it
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ran 1: 1 passed, 0 failed, 0 errors, 0 skipped" in out.stdout
    assert suite in out.stdout or str(tmp_path) in out.stdout


def test_a_reader_that_stops_early_loses_neither_json_nor_status(daemon, tmp_path):
    """`... | head -3`: the report's reader goes away at once; the JSON is
    still written, the exit status is still the suite's, no traceback."""
    suite = write_suite(tmp_path, {"test_a.py": TEST_A})
    r, w = os.pipe()
    os.close(r)                                 # nobody will read the report
    try:
        p = subprocess.run([sys.executable, "-m", "softrdma", "rdma-core-tests", "--suite", suite, "--json",
                            str(tmp_path / "r.json")], env=daemon, stdout=w, stderr=subprocess.PIPE, text=True,
                           timeout=120)
    finally:
        os.close(w)
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert json.loads((tmp_path / "r.json").read_text())["counts"]["failed"] == 1


def test_a_suite_that_does_not_load_is_an_error(daemon, tmp_path):
    broken = "import pyverbs.no_such_module\n" + TEST_A
    suite = write_suite(tmp_path, {"test_a.py": broken})
    out = softrdma(["--suite", suite, "--json", str(tmp_path / "r.json")], daemon)
    assert out.returncode == 1
    assert ("ERROR: the suite did not run to its end: ModuleNotFoundError: No module named "
            "'pyverbs.no_such_module'") in out.stdout, out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert json.loads((tmp_path / "r.json").read_text())["completed"] is False


def test_a_hang_is_stopped_and_named(daemon, tmp_path):
    hang = "import time, unittest\nclass H(unittest.TestCase):\n    def test_hang(self):\n        time.sleep(600)\n"
    suite = write_suite(tmp_path, {"test_h.py": hang})
    out = softrdma(["--suite", suite, "--timeout", "5"], daemon)
    assert out.returncode == 1
    assert "ERROR: no result after 5 s; it hung in tests.test_h.H.test_hang" in out.stdout, out.stdout


def fake_apt_get(bindir, script: str) -> dict:
    bindir.mkdir()
    (bindir / "apt-get").write_text("#!/bin/sh\n" + script)
    (bindir / "apt-get").chmod(0o755)
    return dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.skipif(not shutil.which("dpkg-deb"), reason="dpkg-deb is not installed")
def test_without_suite_the_package_is_downloaded_unpacked_and_run(daemon, tmp_path):
    """apt-get download -> dpkg -x -> gunzip -> run, with an apt-get that
    hands over a python3-pyverbs .deb built here (no network)."""
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text("Package: python3-pyverbs\nVersion: 44.0-2\nArchitecture: all\n"
                                            "Maintainer: x <x@example.org>\nDescription: test\n")
    write_suite(pkg / "usr" / "share" / "doc" / "rdma-core", {"test_b.py": TEST_B}, gzipped={"test_b.py"})
    deb = tmp_path / "python3-pyverbs_44.0-2_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-b", str(pkg), str(deb)], check=True, capture_output=True)
    env = fake_apt_get(tmp_path / "bin", f'[ "$1 $2" = "download python3-pyverbs" ] && cp "{deb}" . \n')
    env.pop("PYTHONPATH", None)
    env["SOFTRDMA_RUN"] = daemon["SOFTRDMA_RUN"]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    out = softrdma(["--json", str(tmp_path / "r.json")], env, cwd=cwd)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("rdma-core tests in Debian's python3-pyverbs\n")
    assert "ran 3: 0 passed, 0 failed, 0 errors, 3 skipped" in out.stdout
    assert json.loads((tmp_path / "r.json").read_text())["skipped_by_reason"][0] == \
        {"reason": "Device is not mlx5", "count": 2}
    assert not os.listdir(cwd)              # downloaded into a temporary directory, not the current one


def test_a_failing_apt_get_is_one_line_and_exit_2(tmp_path):
    env = fake_apt_get(tmp_path / "bin", 'echo "E: Unable to locate package python3-pyverbs" >&2; exit 100\n')
    out = softrdma([], env)
    assert out.returncode == 2 and out.stdout == "" and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("softrdma rdma-core-tests: apt-get download python3-pyverbs failed "
                                 "(E: Unable to locate package python3-pyverbs)")


def test_without_apt_get_one_line_and_exit_2(tmp_path):
    env = dict(os.environ, PATH=str(tmp_path))          # no apt-get, no dpkg
    out = softrdma([], env)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("softrdma rdma-core-tests: apt-get not found: ")
    assert "--suite DIR" in out.stderr


def test_a_missing_suite_directory_is_one_line(tmp_path):
    out = softrdma(["--suite", str(tmp_path)], dict(os.environ))
    assert out.returncode == 2 and out.stderr.count("\n") == 1
    assert "no run_tests.py in" in out.stderr


def test_parse_older_unittest_lines_docstrings_and_interleaved_output():
    text = textwrap.dedent("""\
        test_a (tests.test_x.C) ... ok
        test_b (tests.test_x.C)
        Checks b. ... some output
        FAIL
        test_c (tests.test_x.C.test_c) ... skipped "it's not there"
        setUpClass (tests.test_y.D) ... skipped 'Device is not mlx5'

        ======================================================================
        FAIL: test_b (tests.test_x.C)
        Checks b.
        ----------------------------------------------------------------------
        Traceback (most recent call last):
          File "x.py", line 3, in test_b
            self.assertTrue(False)
        AssertionError: False is not true

        ----------------------------------------------------------------------
        Ran 4 tests in 0.1s

        FAILED (failures=1, skipped=2)
        """)
    res = parse(text)
    assert [(o.test, o.status, o.reason) for o in res.outcomes] == [
        ("tests.test_x.C.test_a", "passed", ""),
        ("tests.test_x.C.test_b", "failed", "AssertionError: False is not true"),
        ("tests.test_x.C.test_c", "skipped", "it's not there"),
        ("tests.test_y.D.setUpClass", "skipped", "Device is not mlx5"),
    ]
    assert res.ran == 4 and not res.problem and not res.ok


# --hugepages: the suite's huge-page tests check the 2 MiB pool, as rdma-core's utils.huge_pages_supported
TEST_HUGE = '''\
import os, time, unittest

class HugeTest(unittest.TestCase):
    def test_free_huge_pages(self):
        with open('/proc/meminfo') as f:
            free = next(int(l.split()[1]) for l in f if l.startswith('HugePages_Free:'))
        print('free huge pages:', free, end=' ')
        self.assertGreaterEqual(free, int(os.environ['WANT_HUGE']))
        if os.environ.get('HANG_HUGE'):
            open(os.environ['HANG_HUGE'], 'w').close()
            time.sleep(600)
'''
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def _nr_hugepages() -> int:
    with open(NR_HUGEPAGES) as f:
        return int(f.read())


def _free_huge_pages() -> int:
    with open("/proc/meminfo") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("HugePages_Free:"))


@pytest.fixture
def as_root():
    if not os.path.exists(NR_HUGEPAGES):
        pytest.skip("no huge pages in this kernel")
    if os.geteuid() != 0 and os.environ.get("CI") != "true":
        pytest.skip("--hugepages needs root")
    before = _nr_hugepages()
    yield
    assert _nr_hugepages() == before


def test_hugepages_reserves_for_the_run_and_restores(daemon, tmp_path, as_root):
    before = _nr_hugepages()
    want = _free_huge_pages() + 3
    suite = write_suite(tmp_path, {"test_h.py": TEST_HUGE})
    out = softrdma(["--suite", suite, "--hugepages", str(want), "-v"], dict(daemon, WANT_HUGE=str(want)))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ran 1: 1 passed" in out.stdout and f"free huge pages: {want}" in out.stderr
    assert _nr_hugepages() == before
    # without the option the same test sees too few
    out = softrdma(["--suite", suite], dict(daemon, WANT_HUGE=str(want)))
    assert out.returncode == 1 and "ran 1: 0 passed, 1 failed" in out.stdout


def test_hugepages_restored_when_the_run_is_stopped(daemon, tmp_path, as_root):
    import signal
    import time
    before = _nr_hugepages()
    want = _free_huge_pages() + 2
    suite = write_suite(tmp_path, {"test_h.py": TEST_HUGE})
    flag = tmp_path / "running"
    proc = subprocess.Popen([sys.executable, "-m", "softrdma", "rdma-core-tests", "--suite", suite,
                             "--hugepages", str(want)], env=dict(daemon, WANT_HUGE=str(want), HANG_HUGE=str(flag)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        assert flag.exists(), proc.communicate(timeout=10)
        assert _nr_hugepages() > before
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode != 0 and _nr_hugepages() == before


def test_hugepages_needs_root_one_line(tmp_path, monkeypatch, capsys):
    """Not root (the uid is made to look so: the test runs as root in CI):
    one line and exit 2, before anything runs, the pool untouched."""
    if not os.path.exists(NR_HUGEPAGES):
        pytest.skip("no huge pages in this kernel")
    from softrdma.tools import rdma_core_tests
    before = _nr_hugepages()
    suite = write_suite(tmp_path, {"test_h.py": TEST_HUGE})
    monkeypatch.setattr(rdma_core_tests.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(rdma_core_tests, "run_suite", lambda *a: pytest.fail("the suite ran"))
    assert rdma_core_tests.main(["--suite", suite, "--hugepages", str(_free_huge_pages() + 1)]) == 2
    assert capsys.readouterr().err == f"softrdma rdma-core-tests: --hugepages needs root: it writes {NR_HUGEPAGES}\n"
    assert _nr_hugepages() == before
