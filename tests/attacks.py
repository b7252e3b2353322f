"""Hostile clients shared by tests/system/hostile/test_exhaustion.py and scripts/chaos.py.

half_open_flood(port, socks, n)   non-blocking connects that never send a byte
ping_flood(port, sockets, s)      a subprocess: sockets that upgrade, never authenticate and send
                                  pings as fast as they can; prints how many the gateway cut
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys

PING_FLOOD = r"""
import base64, os, socket, sys, threading, time
port, sockets, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
ping = b"\x89\x80\0\0\0\0" * 2000  # masked empty pings
cut = []
def flood():
    s = socket.create_connection(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    s.recv(4096)
    s.setblocking(False)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            s.send(ping)
            s.recv(1 << 16)  # read the pongs, as a flooder that wants to go on would
        except BlockingIOError:
            time.sleep(0.001)
        except OSError:
            cut.append(1)
            return
threads = [threading.Thread(target=flood) for _ in range(sockets)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(cut))
"""


def ping_flood(port: int, sockets: int = 16, seconds: float = 4.0) -> subprocess.Popen[bytes]:
    """Start the flood in its own process (in the caller's, it would share a bystander's GIL)."""
    return subprocess.Popen(
        [sys.executable, "-c", PING_FLOOD, str(port), str(sockets), str(seconds)], stdout=subprocess.PIPE
    )


async def half_open_flood(port: int, socks: list[socket.socket], n: int = 3000, batch: int = 50) -> None:
    """Non-blocking connects that never send a byte, `batch` every 20 ms, until `n` are open (appended
    to `socks`; the caller closes them)."""
    while len(socks) < n:
        for _ in range(min(batch, n - len(socks))):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        await asyncio.sleep(0.02)
