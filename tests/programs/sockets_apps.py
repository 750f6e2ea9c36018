"""Unmodified socket programs for ``softrdma run --sockets`` (they know
nothing of rsockets):

    sockets_apps.py echo-server PORT     socketserver echo; prints "ready"
    sockets_apps.py echo-client PORT N   sends N bytes, prints the sha256 of the echo
    sockets_apps.py aio-server PORT      asyncio stream echo server; prints "ready"
    sockets_apps.py aio-client PORT N    asyncio stream client, as echo-client
"""

import asyncio
import hashlib
import random
import socket
import socketserver
import sys


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        while True:
            data = self.request.recv(65536)
            if not data:
                return
            self.request.sendall(data)


def payload(n):
    return random.Random(7).randbytes(n)


def echo_client(port, n):
    data = payload(n)
    with socket.create_connection(("127.0.0.1", port)) as s:
        got = bytearray()
        for i in range(0, n, 65536):
            s.sendall(data[i:i + 65536])
            while len(got) < min(n, i + 65536):
                got += s.recv(65536)
    print(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest(), flush=True)


async def aio_handle(r, w):
    while data := await r.read(65536):
        w.write(data)
        await w.drain()
    w.close()


async def aio_server(port):
    srv = await asyncio.start_server(aio_handle, "127.0.0.1", port)
    print("ready", flush=True)
    async with srv:
        await srv.serve_forever()


async def aio_client(port, n):
    data = payload(n)
    r, w = await asyncio.open_connection("127.0.0.1", port)

    async def send():
        w.write(data)
        await w.drain()
    # read while writing: the echo comes back while the rest is still going out
    got, _ = await asyncio.gather(r.readexactly(n), send())
    w.close()
    print(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest(), flush=True)


if __name__ == "__main__":
    mode, port = sys.argv[1], int(sys.argv[2])
    if mode == "echo-server":
        socketserver.TCPServer.allow_reuse_address = True
        with socketserver.ThreadingTCPServer(("127.0.0.1", port), Echo) as srv:
            print("ready", flush=True)
            srv.serve_forever()
    elif mode == "echo-client":
        echo_client(port, int(sys.argv[3]))
    elif mode == "aio-server":
        asyncio.run(aio_server(port))
    else:
        asyncio.run(aio_client(port, int(sys.argv[3])))
