"""The one registered chunk pool every connection shares.

One MR, cut into equal chunks; a chunk is either free, posted to the SRQ as
a receive buffer, or carrying a fragment being sent.  Work request IDs are
chunk indices, so a completion names its chunk.
"""

from __future__ import annotations

from pyverbs.mr import MR
import pyverbs.enums as e


class ChunkPool:
    def __init__(self, pd, chunk_size: int, count: int):
        self.chunk_size = chunk_size
        self.count = count
        self.mr = MR(pd, chunk_size * count, e.IBV_ACCESS_LOCAL_WRITE)
        self.free = list(range(count - 1, -1, -1))

    def take(self) -> int | None:
        return self.free.pop() if self.free else None

    def give(self, idx: int) -> None:
        self.free.append(idx)

    def addr(self, idx: int) -> int:
        return self.mr.buf + idx * self.chunk_size

    def write(self, idx: int, data: bytes, offset: int = 0) -> None:
        self.mr.write(data, len(data), idx * self.chunk_size + offset)

    def read(self, idx: int, length: int, offset: int = 0) -> bytes:
        return self.mr.read(length, idx * self.chunk_size + offset)

    def close(self) -> None:
        self.mr.close()
