"""Huge pages for a test: ``huge_pages`` reserves free ones of the
default size (2 MiB here) as root when there are too few, and restores
the previous /proc/sys/vm/nr_hugepages after.  It skips where that cannot
be done -- never in CI (CI=true runs as root): there it fails instead."""

from __future__ import annotations

import os

import pytest

HUGE = 0x200000
NR_HUGEPAGES = "/proc/sys/vm/nr_hugepages"


def _meminfo() -> dict[str, str]:
    with open("/proc/meminfo") as f:
        return dict(line.split(":", 1) for line in f)


@pytest.fixture
def huge_pages():
    """At least 8 free huge pages of 2 MiB for the test; yields their size."""
    ci = os.environ.get("CI") == "true"
    info = _meminfo()
    if int(info.get("Hugepagesize", "0 kB").split()[0]) * 1024 != HUGE:
        if ci:
            pytest.fail("the default huge page size is not 2 MiB")
        pytest.skip("the default huge page size is not 2 MiB")
    with open(NR_HUGEPAGES) as f:
        before = int(f.read())
    want = before + max(0, 8 - int(info["HugePages_Free"]))
    if want != before:
        if not os.access(NR_HUGEPAGES, os.W_OK) and not ci:
            pytest.skip(f"reserving huge pages needs root ({NR_HUGEPAGES})")
        with open(NR_HUGEPAGES, "w") as f:
            f.write(str(want))
        if int(_meminfo()["HugePages_Free"]) < 8 and not ci:
            with open(NR_HUGEPAGES, "w") as f:
                f.write(str(before))
            pytest.skip("the kernel could not reserve 8 huge pages (memory too fragmented?)")
    try:
        yield HUGE
    finally:
        if want != before:
            with open(NR_HUGEPAGES, "w") as f:
                f.write(str(before))
