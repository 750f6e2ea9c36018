"""A test peer over softrdma rsockets.

    rsocket_peer.py server HOST PORT CONNS        accept CONNS connections, read each
                                                  to EOF (all at once, select() on
                                                  fileno()), answer each with
                                                  "<bytes> <sha256>\\n"
    rsocket_peer.py client HOST PORT CONNS BYTES  open CONNS connections, send BYTES
                                                  of a seeded stream on each
                                                  (round-robin), shut down writing,
                                                  print each answer

The server prints "listening" once it listens.
"""

import hashlib
import random
import selectors
import sys

from softrdma.rsocket import rsocket


def stream_bytes(seed: int, n: int) -> bytes:
    return random.Random(seed).randbytes(n)


def server(host, port, conns):
    ls = rsocket()
    ls.bind((host, port))
    ls.listen(conns)
    print("listening", flush=True)
    sel = selectors.DefaultSelector()
    state = {}
    for _ in range(conns):
        c, _ = ls.accept()
        c.setblocking(False)
        state[c] = [0, hashlib.sha256()]
        sel.register(c, selectors.EVENT_READ)
    buf = bytearray(1 << 16)
    open_ = conns
    while open_:
        for key, _ in sel.select(timeout=60):
            c = key.fileobj
            try:
                n = c.recv_into(buf)
            except BlockingIOError:
                continue
            if n:
                state[c][0] += n
                state[c][1].update(memoryview(buf)[:n])
                continue
            sel.unregister(c)
            c.setblocking(True)
            c.sendall(f"{state[c][0]} {state[c][1].hexdigest()}\n".encode())
            open_ -= 1
    for c in state:
        c.close()
    ls.close()


def client(host, port, conns, nbytes):
    socks = []
    for _ in range(conns):
        s = rsocket()
        s.connect((host, port))
        socks.append(s)
    chunk = 1 << 20
    for i, s in enumerate(socks):
        s.data = stream_bytes(i, min(nbytes, 8 << 20))
        s.sent = 0
    live = list(socks)
    while live:
        for s in list(live):
            n = min(chunk, nbytes - s.sent)
            off = s.sent % len(s.data)
            piece = (s.data + s.data)[off:off + n] if off + n > len(s.data) else s.data[off:off + n]
            s.sendall(piece)
            s.sent += n
            if s.sent == nbytes:
                s.shutdown(1)
                live.remove(s)
    for i, s in enumerate(socks):
        h = hashlib.sha256()
        data = s.data
        left = nbytes
        while left:
            n = min(left, len(data))
            h.update(data[:n])
            left -= n
        answer = b""
        while not answer.endswith(b"\n"):
            part = s.recv(200)
            if not part:
                break
            answer += part
        print(answer.decode().strip(), h.hexdigest(), flush=True)
        s.close()


if __name__ == "__main__":
    mode, host, port, conns = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if mode == "server":
        server(host, port, conns)
    else:
        client(host, port, conns, int(sys.argv[5]))
