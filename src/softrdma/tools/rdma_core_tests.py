"""``softrdma rdma-core-tests``: rdma-core's own test suite, unmodified, on softrdma.

rdma-core's ``tests/`` directory is the suite every provider (rxe, mlx5, efa)
is checked with; it is written against pyverbs.  This command runs its
``run_tests.py`` as it is, through ``softrdma run`` (softrdma's ``pyverbs`` on
PYTHONPATH, softrdma's devices in /sys/class), against the embedded default
device, and turns unittest's verbose output into counts: passed, failed,
errors, skipped (every skip reason, grouped), and the cause of each failure
and error.

Where the suite comes from: ``--suite DIR`` (an unpacked rdma-core checkout,
its ``tests/`` directory, or a ``dpkg -x`` of python3-pyverbs); without it,
Debian's ``python3-pyverbs`` package, fetched with ``apt-get download`` and
unpacked with ``dpkg -x`` into a temporary directory.  Either way the suite
is copied to a temporary directory and its ``*.py.gz`` files (Debian
gzips the larger ones) are gunzipped there; the source is never written to.

Exit status: 0 when no test failed or errored, 1 otherwise (a suite that
does not load, or a run that hangs past ``--timeout``, is an error), 2 when
the suite cannot be found or fetched.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import glob
import gzip
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from ..cliargs import Parser, int_range

PACKAGE = "python3-pyverbs"
#: where run_tests.py sits, relative to what --suite may name
SUITE_SUBDIRS = ("", "tests", os.path.join("usr", "share", "doc", "rdma-core", "tests"))
DEFAULT_TIMEOUT = 3600

# unittest's verbose lines: "test_x (tests.test_mod.Class.test_x) ... ok"
# (Python < 3.11 leaves the method name out of the parentheses); a test with a
# docstring has its first line on a line of its own, before " ... ".
TEST_START = re.compile(r"^(\w+) \(([\w.]+)\)")
# at the end of the line: what a test prints without a newline comes before it
RESULT = re.compile(r"(ok|FAIL|ERROR|expected failure|unexpected success|skipped (['\"])(.*)\2)\s*$")
RAN = re.compile(r"^Ran (\d+) tests? in ")
TRACEBACK = re.compile(r"^={20,}\n(FAIL|ERROR): (.+?)\n-{20,}\n(.*?)(?=^={20,}$|^-{20,}\nRan )",
                       re.MULTILINE | re.DOTALL)

STATUS = {"ok": "passed", "FAIL": "failed", "ERROR": "error",
          "expected failure": "expected failure", "unexpected success": "unexpected success"}


class SuiteError(Exception):
    """The suite cannot be found or fetched: one line for the user, exit 2."""


@dataclasses.dataclass
class Outcome:
    test: str               # unittest's id: tests.test_mod.Class.test_name
    status: str             # passed, failed, error, skipped, expected failure, unexpected success
    reason: str = ""        # the skip reason, or the last line of the traceback


@dataclasses.dataclass
class Results:
    outcomes: list[Outcome]
    ran: int | None         # unittest's "Ran N tests", None when the run never got there
    problem: str = ""       # why the run did not finish (a crash while loading, a hang)
    running: str | None = None  # the test started last and never finished

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    def by_status(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    @property
    def ok(self) -> bool:
        return not self.problem and not any(o.status in ("failed", "error", "unexpected success")
                                            for o in self.outcomes)

    def skip_reasons(self) -> list[tuple[str, int]]:
        return _grouped(o.reason for o in self.by_status("skipped"))

    def error_causes(self) -> list[tuple[str, int]]:
        return _grouped(o.reason or "(no traceback)" for o in self.outcomes if o.status in ("failed", "error"))

    def to_json(self) -> dict:
        return {
            "completed": not self.problem, "problem": self.problem, "ran": self.ran, "running": self.running,
            "counts": {s: self.count(s) for s in ("passed", "failed", "error", "skipped",
                                                  "expected failure", "unexpected success")},
            "skipped_by_reason": [{"reason": r, "count": n} for r, n in self.skip_reasons()],
            "causes": [{"cause": r, "count": n} for r, n in self.error_causes()],
            "failures": [dataclasses.asdict(o) for o in self.by_status("failed")],
            "errors": [dataclasses.asdict(o) for o in self.by_status("error")],
            "tests": [dataclasses.asdict(o) for o in self.outcomes],
        }


def _grouped(items) -> list[tuple[str, int]]:
    """(item, count), most frequent first, then by name."""
    return sorted(collections.Counter(items).items(), key=lambda kv: (-kv[1], kv[0]))


def _test_id(method: str, where: str) -> str:
    return where if where.endswith("." + method) else f"{where}.{method}"


def _last_exception_line(traceback: str) -> str:
    """The exception a traceback ends with ("AttributeError: ..."), the cause
    the report groups by."""
    lines = [ln for ln in traceback.rstrip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if not ln.startswith((" ", "\t")):
            return ln.strip()
    return lines[-1].strip() if lines else ""


def parse(output: str) -> Results:
    """unittest's verbose output (``-v``) -> Results.

    Tolerates what the tests print themselves (the run's stdout and stderr
    are one stream): a result is taken only after a test's description, at
    the end of its line or on a line of its own."""
    outcomes: list[Outcome] = []
    pending: str | None = None
    ran = None
    for line in output.splitlines():
        m = TEST_START.match(line)
        if m:
            pending = _test_id(m.group(1), m.group(2))
        if pending is None:
            continue
        if " ... " in line:
            res = RESULT.search(line.split(" ... ", 1)[1].strip())
        else:           # the result alone on a line, after what the test printed
            res = RESULT.fullmatch(line.strip())
        if not res:
            continue
        word = res.group(1)
        if word.startswith("skipped"):
            outcomes.append(Outcome(pending, "skipped", res.group(3)))
        else:
            outcomes.append(Outcome(pending, STATUS[word]))
        pending = None
    for r in (RAN.match(ln) for ln in output.splitlines()):
        if r:
            ran = int(r.group(1))
    causes = {}
    for kind, desc, tb in TRACEBACK.findall(output):
        m = TEST_START.match(desc)
        causes[_test_id(m.group(1), m.group(2)) if m else desc] = _last_exception_line(tb)
    for o in outcomes:
        if o.status in ("failed", "error"):
            o.reason = causes.get(o.test, "")
    problem = ""
    if ran is None:
        cause = _last_exception_line(output.split("Traceback (most recent call last):")[-1]) \
            if "Traceback (most recent call last):" in output else ""
        problem = f"the suite did not run to its end: {cause}" if cause else "the suite did not run to its end"
        if pending:
            problem += f" (last test started: {pending})"
    return Results(outcomes, ran, problem, pending)


# --- getting the suite ------------------------------------------------------------------------

def find_run_tests(root: str) -> str:
    """The directory holding run_tests.py under what the user named."""
    for sub in SUITE_SUBDIRS:
        d = os.path.join(root, sub)
        if os.path.isfile(os.path.join(d, "run_tests.py")):
            return d
    raise SuiteError(f"no run_tests.py in {root} (nor in its tests/ or usr/share/doc/rdma-core/tests/)")


def fetch_package(workdir: str) -> str:
    """Debian's python3-pyverbs, downloaded and unpacked under workdir;
    returns the unpacked root."""
    for tool in ("apt-get", "dpkg"):
        if not shutil.which(tool):
            raise SuiteError(f"{tool} not found: fetching rdma-core's tests needs apt and a Debian/Ubuntu "
                             f"package archive with {PACKAGE} (or name an unpacked suite with --suite DIR)")
    p = subprocess.run(["apt-get", "download", PACKAGE], cwd=workdir, capture_output=True, text=True)
    debs = glob.glob(os.path.join(workdir, f"{PACKAGE}_*.deb"))
    if p.returncode != 0 or not debs:
        why = (p.stderr.strip().splitlines() or ["no package downloaded"])[-1]
        raise SuiteError(f"apt-get download {PACKAGE} failed ({why}); it needs a package archive that has "
                         f"{PACKAGE} (or name an unpacked suite with --suite DIR)")
    root = os.path.join(workdir, "x")
    p = subprocess.run(["dpkg", "-x", debs[0], root], capture_output=True, text=True)
    if p.returncode != 0:
        why = (p.stderr.strip().splitlines() or ["?"])[-1]
        raise SuiteError(f"dpkg -x {os.path.basename(debs[0])} failed: {why}")
    return root


def stage(src: str, workdir: str) -> str:
    """A copy of the suite directory under workdir, with *.py.gz gunzipped."""
    dst = os.path.join(workdir, "tests")
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
    for gz in glob.glob(os.path.join(dst, "*.py.gz")):
        with gzip.open(gz, "rb") as fin, open(gz[:-3], "wb") as fout:
            shutil.copyfileobj(fin, fout)
        os.unlink(gz)
    return dst


# --- running it -------------------------------------------------------------------------------

def command(pattern: str | None) -> list[str]:
    cmd = [sys.executable, "-m", "softrdma", "run", "--", "python3", "run_tests.py", "-v"]
    if pattern:
        cmd += ["-k", pattern]         # run_tests.py hands what it does not know to unittest.main
    return cmd


def run_suite(suite: str, pattern: str | None, timeout: float, echo: bool) -> tuple[str, bool]:
    """Runs the suite; returns (its output, whether it timed out)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.Popen(command(pattern), cwd=suite, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    chunks: list[str] = []

    def pump():
        for raw in iter(proc.stdout.readline, b""):
            line = raw.decode(errors="replace")
            chunks.append(line)
            if echo:
                sys.stderr.write(line)
                sys.stderr.flush()
    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        if proc.poll() is None:
            # the whole session: softrdma run execs into unshare, sh, python
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    reader.join(5)
    return "".join(chunks), timed_out


NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


@contextlib.contextmanager
def hugepages(n: int | None):
    """N free huge pages of the default size while the suite runs (its
    huge-page tests skip without them): the pool grows by what is missing,
    and the previous count is written back after -- on failure, ^C or
    SIGTERM too.  SuiteError (one line) when it cannot be done."""
    if not n:
        yield
        return

    def free() -> int:
        with open("/proc/meminfo") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("HugePages_Free:"))
    try:
        with open(NR_HUGEPAGES) as f:
            before = int(f.read())
        want = before + max(0, n - free())
    except (OSError, StopIteration, ValueError):
        raise SuiteError(f"--hugepages: this kernel has no huge pages ({NR_HUGEPAGES})") from None
    if want == before:
        yield
        return
    if os.geteuid() != 0:
        raise SuiteError(f"--hugepages needs root: it writes {NR_HUGEPAGES}")

    def put(count: int) -> None:
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(count))
    on_term = None
    if threading.current_thread() is threading.main_thread():
        def stop(sig, frame):
            raise SystemExit(128 + sig)
        on_term = signal.signal(signal.SIGTERM, stop)
    try:
        try:
            put(want)
        except OSError as e:
            raise SuiteError(f"--hugepages: cannot write {NR_HUGEPAGES}: {e.strerror}") from None
        if free() < n:
            raise SuiteError(f"--hugepages: the kernel made only {free()} of {n} huge pages free"
                             " (memory too fragmented, or too little of it)")
        yield
    finally:
        put(before)
        if on_term is not None:
            signal.signal(signal.SIGTERM, on_term)


# --- the report -------------------------------------------------------------------------------

def report(res: Results, suite: str) -> str:
    out = [f"rdma-core tests in {suite}"]
    if res.problem:
        out.append(f"ERROR: {res.problem}")
    out.append(f"ran {res.ran if res.ran is not None else len(res.outcomes)}: "
               f"{res.count('passed')} passed, {res.count('failed')} failed, {res.count('error')} errors, "
               f"{res.count('skipped')} skipped"
               + "".join(f", {res.count(s)} {s}" for s in ("expected failure", "unexpected success")
                         if res.count(s)))
    if res.count("skipped"):
        out.append("skipped, by reason:")
        out += [f"  {n:4d}  {reason}" for reason, n in res.skip_reasons()]
    for status, title in (("failed", "failures"), ("error", "errors"), ("unexpected success", "unexpected successes")):
        items = res.by_status(status)
        if items:
            out.append(f"{title}:")
            out += [f"  {o.test}" + (f": {o.reason}" if o.reason else "") for o in items]
    if res.count("failed") + res.count("error"):
        out.append("failures and errors, by cause:")
        out += [f"  {n:4d}  {cause}" for cause, n in res.error_causes()]
    return "\n".join(out)


def add_arguments(p) -> None:
    p.add_argument("--suite", metavar="DIR",
                   help=f"an unpacked rdma-core tests directory (default: fetch Debian's {PACKAGE} with apt-get)")
    p.add_argument("-k", dest="pattern", metavar="PATTERN",
                   help="only tests whose name contains PATTERN (unittest's -k: a substring or a glob)")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON to FILE")
    p.add_argument("--timeout", type=int_range(1), default=DEFAULT_TIMEOUT, metavar="SECONDS",
                   help=f"stop the run after SECONDS and count it as an error (default {DEFAULT_TIMEOUT})")
    p.add_argument("-v", "--verbose", action="store_true", help="show the suite's own output as it runs")
    p.add_argument("--hugepages", type=int_range(1), metavar="N",
                   help="have N free huge pages of the default size for the run (root: grows "
                        f"{NR_HUGEPAGES}, and puts the previous count back after)")


def run(args) -> int:
    prog = "softrdma rdma-core-tests"
    with tempfile.TemporaryDirectory(prefix="softrdma-rdma-core-tests-") as work:
        try:
            root = args.suite if args.suite else fetch_package(work)
            if not os.path.isdir(root):
                raise SuiteError(f"{root}: no such directory")
            source = find_run_tests(root)
            suite = stage(source, work)
        except SuiteError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
        try:
            with hugepages(args.hugepages):
                output, timed_out = run_suite(suite, args.pattern, args.timeout, args.verbose)
        except SuiteError as e:
            print(f"{prog}: {e}", file=sys.stderr)
            return 2
    res = parse(output)
    if timed_out:
        res.problem = f"no result after {args.timeout} s" + (f"; it hung in {res.running}" if res.running else "")
    shown = args.suite or f"Debian's {PACKAGE}"
    if args.json:               # first: a reader of the report that stops early (| head) must not lose it
        data = {"suite": shown, "pattern": args.pattern, **res.to_json()}
        with open(args.json, "w") as f:
            json.dump(data, f, indent=2)
            f.write("\n")
    try:
        print(report(res, shown), flush=True)
    except BrokenPipeError:     # the reader went away: the results are still in --json and the exit status
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0 if res.ok else 1


def main(argv: list[str] | None = None, prog: str = "softrdma rdma-core-tests") -> int:
    p = Parser(prog=prog, description="run rdma-core's test suite, unmodified, on softrdma")
    add_arguments(p)
    return run(p.parse_args(argv))
