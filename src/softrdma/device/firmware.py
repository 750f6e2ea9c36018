"""softrdma firmware images and a device's flash.

An image file (what ``flint -i IMAGE burn`` takes, ``softrdma flint
--make-image`` makes) is, all integers big-endian::

    offset  size  field
    0       8     magic  b"SRFWIMG\\0"
    8       2     format version (1)
    10      2     header length (64)
    12      2     FW major       } the firmware version, e.g. 16.35.2000
    14      2     FW minor       }
    16      2     FW sub-minor   }
    18      2     device ID the image is for (0x1017: ConnectX-5)
    20      16    PSID, NUL-padded ASCII
    36      4     release date: day, month, year (u8, u8, u16)
    40      4     payload length N
    44      20    reserved, zero
    64      N     payload (the firmware proper; opaque here)
    64+N    4     CRC-32 (zlib's) of bytes 0 .. 64+N

A file that is too short, has another magic or format version, a length
that does not add up, or a CRC that does not match is refused before
anything is written (``ImageError``, flint's ``-E-`` message), and the
device keeps its firmware.  An image for another device ID or PSID is
refused too (flint refuses a PSID change without ``-allow_psid_change``).

The flash (``Flash``) is a JSON file per device in the run directory,
``RUN/firmware/<dev>.json``: the version, PSID and date burnt, and the
version the device is running -- a burn changes the flash only; the new
firmware runs after the next firmware reset, as flint says
(``-I- To load new FW run mlxfwreset or reboot machine.``).
"""

from __future__ import annotations

import errno
import json
import os
import struct
import zlib
from dataclasses import dataclass

from ..errors import VerbsError

MAGIC = b"SRFWIMG\0"
FORMAT_VERSION = 1
HEADER = struct.Struct(">8sHHHHHH16sBBHI20s")
assert HEADER.size == 64
CRC = struct.Struct(">I")


class ImageError(ValueError):
    """An image flint refuses; the message is flint's ``-E-`` text."""


@dataclass(frozen=True)
class Image:
    version: str                # "16.35.2000"
    device_id: int
    psid: str
    date: str                   # "dd.mm.yyyy"
    payload: bytes = b""


def _version(text: str) -> tuple[int, int, int]:
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() and int(p) < 1 << 16 for p in parts):
        raise ValueError(f"bad firmware version {text!r}: expected MAJOR.MINOR.SUBMINOR")
    return int(parts[0]), int(parts[1]), int(parts[2])


def _date(text: str) -> tuple[int, int, int]:
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"bad release date {text!r}: expected dd.mm.yyyy")
    d, m, y = (int(p) for p in parts)
    if not (1 <= d <= 31 and 1 <= m <= 12 and 1 <= y < 1 << 16):
        raise ValueError(f"bad release date {text!r}")
    return d, m, y


def make_image(img: Image) -> bytes:
    """The image file's bytes."""
    major, minor, sub = _version(img.version)
    d, m, y = _date(img.date)
    psid = img.psid.encode("ascii")
    if not psid or len(psid) > 16:
        raise ValueError(f"bad PSID {img.psid!r}: 1 to 16 ASCII characters")
    head = HEADER.pack(MAGIC, FORMAT_VERSION, HEADER.size, major, minor, sub, img.device_id,
                       psid.ljust(16, b"\0"), d, m, y, len(img.payload), bytes(20))
    body = head + img.payload
    return body + CRC.pack(zlib.crc32(body))


def parse_image(data: bytes, name: str = "image") -> Image:
    """Check and read an image file; ImageError with flint's message."""
    if len(data) < HEADER.size + CRC.size or data[:8] != MAGIC:
        raise ImageError(f"Cannot open {name}: Not a valid image file (no softrdma firmware image signature)")
    (_, fmt, hlen, major, minor, sub, dev_id, psid, d, m, y, plen, _) = HEADER.unpack_from(data)
    if fmt != FORMAT_VERSION or hlen != HEADER.size:
        raise ImageError(f"Cannot open {name}: Unsupported image format version {fmt}")
    if len(data) != hlen + plen + CRC.size:
        raise ImageError(f"Cannot open {name}: Image size {len(data)} does not match its header"
                         f" ({hlen + plen + CRC.size} bytes)")
    (crc,) = CRC.unpack_from(data, hlen + plen)
    actual = zlib.crc32(data[:hlen + plen])
    if crc != actual:
        raise ImageError(f"Bad CRC: {name}: expected 0x{crc:08x}, actual 0x{actual:08x}."
                         f" The image is corrupted")
    return Image(f"{major}.{minor}.{sub}", dev_id, psid.rstrip(b"\0").decode("ascii", "replace"),
                 f"{d:02d}.{m:02d}.{y:04d}", bytes(data[hlen:hlen + plen]))


class Flash:
    """One device's flash and running firmware, persisted in ``path``."""

    def __init__(self, path: str, *, version: str, psid: str, date: str):
        self.path = path
        self.version, self.psid, self.date = version, psid, date
        self.running = version
        try:
            with open(path) as f:
                data = json.load(f)
            self.version = str(data["version"])
            self.psid = str(data["psid"])
            self.date = str(data["date"])
            self.running = str(data["running"])
        except FileNotFoundError:
            self._save()
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise VerbsError(errno.EIO, f"{path}: unreadable flash record ({e})") from None

    def burn(self, img: Image, device_id: int, allow_psid_change: bool = False) -> None:
        """Write ``img`` (already parsed) to the flash: the device ID must be
        the device's, the PSID the flash's unless allowed."""
        if img.device_id != device_id:
            raise VerbsError(errno.EINVAL, f"The image is for device ID 0x{img.device_id:04x}, this device is"
                                           f" 0x{device_id:04x}")
        if img.psid != self.psid and not allow_psid_change:
            raise VerbsError(errno.EINVAL, f"PSID mismatch. The PSID on flash ({self.psid}) is different than"
                                           f" the PSID in the image ({img.psid}).")
        self.version, self.psid, self.date = img.version, img.psid, img.date
        self._save()

    def boot(self) -> bool:
        """A firmware reset: the flash's firmware runs.  Whether it changed."""
        changed = self.running != self.version
        self.running = self.version
        self._save()
        return changed

    def _save(self) -> None:
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as f:
            json.dump({"version": self.version, "psid": self.psid, "date": self.date, "running": self.running}, f)
        os.replace(tmp, self.path)
