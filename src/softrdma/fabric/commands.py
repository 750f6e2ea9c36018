"""The fabric server's commands: ibsim's console names on stdin and the
same commands over the control socket ``@<base>:softrdma``.

Owns ``Commands``, the part of ``server.Server`` that turns one command line
into its effect and its one-line answer ("ok ..." or "error: ..."): link
events (Unlink/ReLink, ``link down|up``), the ``error`` drop rate, clients
(Attached, X), Verbose, stats, dumpstate, Quit; and ``control``, the client
side that ``softrdma fabric link|error|cmd`` use.
"""

from __future__ import annotations

import os
import re
import shlex
import socket

from ..wire import ibsim
from .model import FabricError

CONTROL_NAME = "softrdma"
_CONSOLE_PORT_RE = re.compile(r'^"([^"]+)"\[(\d+)\](.*)$')


class Commands:
    """Mixed into ``server.Server``: reads its fabric, router, clients and data socket."""

    def command(self, line: str) -> str:
        """Run one command; returns the answer text (first word 'ok' or 'error:')."""
        try:
            words = shlex.split(line)
        except ValueError as e:
            return f"error: {e}"
        if not words:
            return "ok"
        cmd, args = words[0].lower(), words[1:]
        try:
            if cmd in ("quit", "q"):
                self.running = False
                return "ok quitting"
            if cmd in ("attached", "a"):
                return "ok\n" + "\n".join(
                    f'Client {c.idx}: pid {c.pid} connected at "{c.port.node.nodeid}" port '
                    f"{c.port.num}, lid {c.port.lid}, qp {c.qp} {'SM' if c.issm else ''}"
                    for c in sorted(self.clients.values(), key=lambda c: c.idx)) + \
                    (self.datasock.attached_text() if self.datasock is not None else "")
            if cmd == "x":
                c = self.clients.get(int(args[0]))
                if c is None:
                    return f"error: no client {args[0]}"
                self._release(c, "console X")
                return "ok"
            rest = line.strip()[len(words[0]):].strip()
            if cmd in ("unlink", "relink", "link"):
                down = cmd == "unlink"
                if cmd == "link":
                    if args[:1] not in (["down"], ["up"]):
                        return "error: usage: link down|up NODE PORT"
                    down = args[0] == "down"
                    rest = rest.split(None, 1)[1] if len(args) > 1 else ""
                port, extra = self._port_arg(rest)
                if extra:
                    return f"error: unexpected {' '.join(extra)!r}"
                ev = self.router.link_down(port) if down else self.router.link_up(port)
                self._deliver_unsolicited(ev)
                return f"ok {port.name} {'down' if down else 'up'}, {len(ev)} trap(s)"
            if cmd == "error":
                port, extra = self._port_arg(rest)
                if not 1 <= len(extra) <= 2:
                    return "error: usage: error NODE PORT RATE [ATTR]"
                rate = int(extra[0], 0)
                if not 0 <= rate <= 100:
                    return "error: rate is a percentage 0..100"
                port.err_rate = rate
                port.err_attr = int(extra[1], 0) if len(extra) > 1 else 0
                return f"ok {port.name} drops {rate}%"
            if cmd == "verbose":
                self.verbose = int(args[0]) if args else 1
                self.router.log = self._log_drop if self.verbose else None
                return "ok"
            if cmd == "dumpstate":                  # for `fabric show --sock`: too big for a datagram
                if len(args) != 1:
                    return "error: usage: dumpstate PATH"
                import json

                from .show import snapshot
                tmp = args[0] + ".tmp"
                with open(tmp, "w") as fh:
                    json.dump(snapshot(self.fabric), fh)
                os.replace(tmp, args[0])
                return f"ok {args[0]}"
            if cmd == "stats":
                return "ok " + " ".join(f"{k}={v}" for k, v in self.stats.items()) + \
                    f" clients={len(self.clients)}" + \
                    (self.datasock.stats_text() if self.datasock is not None else "")
            if cmd in ("help", "?"):
                return ("ok commands: Attached, X <n>, Unlink \"node\"[p], ReLink \"node\"[p], "
                        "link down|up NODE PORT, error NODE PORT RATE [ATTR], Verbose [n], "
                        "stats, dumpstate PATH, Quit")
        except (FabricError, IndexError, ValueError) as e:
            return f"error: {e}"
        return f"error: unknown command {words[0]!r} (try help)"

    def _port_arg(self, text: str):
        """A port as ibsim's console writes it ("node"[p]) or as NODE PORT;
        returns (port, remaining words)."""
        m = _CONSOLE_PORT_RE.match(text)
        if m:
            name, num, more = m.group(1), int(m.group(2)), m.group(3).split()
        else:
            w = shlex.split(text)
            if len(w) < 2:
                raise FabricError('expected "node"[port] or NODE PORT')
            name, num, more = w[0], int(w[1], 0), w[2:]
        return self.fabric.node(name).port(num), more

    def _on_console(self, f):
        try:
            data = os.read(f.fileno(), 4096)
        except BlockingIOError:
            return
        if not data:
            self.sel.unregister(f)              # stdin closed: keep serving
            return
        for line in data.decode(errors="replace").splitlines():
            ans = self.command(line)
            self.log(ans)

    def _on_control(self, sock):
        try:
            buf, addr = sock.recvfrom(4096)
        except OSError:
            return
        ans = self.command(buf.decode(errors="replace"))
        if addr:
            try:
                sock.sendto(ans.encode(), addr)
            except OSError:
                pass

    def run_commands(self, commands):
        """The .net file's ``do`` lines."""
        for where, cmd in commands:
            ans = self.command(cmd)
            if ans.startswith("error"):
                raise FabricError(f"{where}: do {cmd}: {ans}")



def control(base: str, line: str, timeout: float = 5.0) -> str:
    """Send one command to a running server's control socket; its answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.bind(ibsim.abstract_name(base, f"softrdma-cli{os.getpid()}"))
        s.settimeout(timeout)
        try:
            s.sendto(line.encode(), ibsim.abstract_name(base, CONTROL_NAME))
        except (ConnectionRefusedError, FileNotFoundError):
            raise FabricError(f"no fabric server on @{base} (is `softrdma fabric serve` "
                              f"running with IBSIM_SOCKNAME={base}?)") from None
        try:
            return s.recv(65536).decode(errors="replace")
        except socket.timeout:
            raise FabricError(f"fabric server on @{base} did not answer") from None
    finally:
        s.close()
