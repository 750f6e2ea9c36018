"""The memory the transport reads and writes, behind one small interface.

The transport never owns memory: every local and remote access goes
through ``Memory.local_view`` / ``Memory.remote_view``, which check the key,
the protection domain, the access flags and the bounds, and return a
writable memoryview of exactly the bytes asked for, or None (the caller
turns None into the spec's status or NAK).  ``MemoryTable`` is the plain
implementation used by the simulator and tests; the device implements the
same interface over shared memory.  An MR's ``view`` is a memoryview (the
library's shared memory) or a ``transport.odp.PagedSpace`` (an
application's own pages, on demand): the checks and the slicing are the
same, so the shared-memory path is unchanged by the second kind.
"""

from __future__ import annotations

import os
from typing import Protocol

from ..enums import ibv_access_flags as A

LOCAL_READ = 0       # local reads need no access flag


class Memory(Protocol):
    def local_view(self, pd: object, lkey: int, addr: int, length: int, access: int) -> memoryview | None: ...
    def remote_view(self, pd: object, rkey: int, va: int, length: int, access: int,
                    qp: object = None) -> memoryview | None: ...
    def invalidate(self, pd: object, key: int) -> bool: ...
    def lookup(self, key: int) -> object | None: ...     # the MR or window a key's index names (FLUSH of an MR)


class MR:
    __slots__ = ("pd", "addr", "length", "access", "lkey", "rkey", "buf", "view", "valid", "mws", "bound_qp")

    def __init__(self, pd, addr: int, length: int, access: int, lkey: int, rkey: int, buf=None, view=None):
        self.pd = pd
        self.addr = addr
        self.length = length
        self.access = access
        self.lkey = lkey
        self.rkey = rkey
        if view is not None:                 # an application's own pages (``transport.odp.PagedSpace``)
            self.buf = None
            self.view = view
        else:
            self.buf = bytearray(length) if buf is None else buf      # any writable buffer (shared memory)
            self.view = memoryview(self.buf)
            if len(self.view) < length:
                raise ValueError("MR buffer shorter than its length")
        self.valid = True
        self.mws: list = []                  # memory windows bound to this MR
        self.bound_qp = None                 # (only a type 2 memory window is bound to a QP)

    def invalidate(self) -> bool:
        """LOCAL_INV / SEND_WITH_INV of this MR's key: refused while windows
        are bound to it (rxe_invalidate_mr: num_mw > 0 -> EINVAL)."""
        if self.mws:
            return False
        self.valid = False
        return True

    def read(self, length: int, offset: int = 0) -> bytes:
        view = self.view[offset:offset + length]
        if view is None:
            raise ValueError("the MR's pages are not mapped there")
        return bytes(view)

    def write(self, data, offset: int = 0) -> None:
        view = self.view[offset:offset + len(data)]
        if view is None:
            raise ValueError("the MR's pages are not mapped there")
        view[0:len(data)] = data


class MemoryTable:
    """The MR table: key -> MR, and the checks of every access.

    ``reg_mr`` backs an MR with a fresh bytearray at a made-up address (the
    simulator, tests); ``register`` takes the buffer and the address the
    application sees (the daemon: a view of the app's shared memory).  Keys
    are ``index << 8 | key`` as rxe makes them; lkey == rkey.  The key byte
    is random (rxe_get_next_key): a peer that learns one key cannot guess
    the next MR's.  ``rng``: where key bytes come from -- by default the
    OS's CSPRNG; the simulator passes a seeded ``random.Random`` so that a
    seeded run is reproducible."""

    def __init__(self, base_addr: int = 0x7F0000000000, rng=None):
        self._mrs: dict[int, MR] = {}     # index -> MR
        self._next_index = 1
        self._next_addr = base_addr
        self._rng = rng
        self._random: list[int] = []       # CSPRNG bytes drawn ahead

    def reg_mr(self, pd, length: int, access: int) -> MR:
        """An MR over fresh zeroed memory at a made-up address."""
        mr = self.register(pd, self._next_addr, length, access)
        self._next_addr += (length + 0xFFFF) & ~0xFFF    # page aligned, gaps between MRs
        return mr

    def _new_key(self) -> int:
        index = self._next_index
        if index >= 1 << 24:
            raise MemoryError("MR key space exhausted")
        self._next_index += 1
        return (index << 8) | self._key_byte()

    def _key_byte(self) -> int:
        if self._rng is not None:
            return self._rng.getrandbits(8)
        if not self._random:
            self._random = list(os.urandom(256))     # one system call per 256 registrations
        return self._random.pop()

    def register(self, pd, addr: int, length: int, access: int, buf=None, view=None) -> MR:
        """An MR over ``buf`` (e.g. a shared-memory view) that the owner sees
        at virtual address ``addr``, or over ``view``, the owner's own pages
        (``transport.odp.PagedSpace``); keys are allocated here."""
        key = self._new_key()
        mr = MR(pd, addr, length, int(access), key, key, buf, view)
        self._mrs[key >> 8] = mr
        return mr

    def dereg_mr(self, mr: MR) -> None:
        for mw in list(mr.mws):             # the owner is gone: its windows lose their memory
            mw.unbind()
        mr.valid = False
        self._mrs.pop(mr.lkey >> 8, None)

    def add_window(self, mw) -> int:
        """Enter a memory window in the table; returns its first rkey."""
        key = self._new_key()
        self._mrs[key >> 8] = mw
        return key

    def remove_window(self, mw) -> None:
        if self._mrs.get(mw.rkey >> 8) is mw:
            del self._mrs[mw.rkey >> 8]

    def lookup(self, key: int):
        """The MR or window whose index ``key`` names (key byte unchecked)."""
        return self._mrs.get(key >> 8)

    def local_view(self, pd, lkey, addr, length, access):
        mr = self._mrs.get(lkey >> 8)
        if mr is None or mr.lkey != lkey or mr.pd is not pd or not mr.valid or access & ~mr.access:
            return None
        off = addr - mr.addr
        if off < 0 or length < 0 or off + length > mr.length:
            return None
        return mr.view[off:off + length]

    def remote_view(self, pd, rkey, va, length, access, qp=None):
        mr = self._mrs.get(rkey >> 8)
        if mr is None or mr.rkey != rkey or mr.pd is not pd or not mr.valid or access & ~mr.access \
                or (mr.bound_qp is not None and mr.bound_qp is not qp):
            return None
        off = va - mr.addr
        if off < 0 or length < 0 or off + length > mr.length:
            return None
        return mr.view[off:off + length]

    def invalidate(self, pd, key):
        """LOCAL_INV / SEND_WITH_INV: the MR or window ``key`` names, with
        its own rules (``MR.invalidate``, ``mw.MW.invalidate``)."""
        mr = self._mrs.get(key >> 8)
        if mr is None or mr.rkey != key or mr.pd is not pd:
            return False
        return mr.invalidate()


# plain ints: these are and-ed on every access
REMOTE_WRITE = int(A.IBV_ACCESS_REMOTE_WRITE)
REMOTE_READ = int(A.IBV_ACCESS_REMOTE_READ)
REMOTE_ATOMIC = int(A.IBV_ACCESS_REMOTE_ATOMIC)
LOCAL_WRITE = int(A.IBV_ACCESS_LOCAL_WRITE)
