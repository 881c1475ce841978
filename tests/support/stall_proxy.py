"""A TCP proxy on loopback that can stop forwarding while keeping every socket open.

It plays the middlebox of a half-open connection (a NAT, a proxy, a dead route): the
client's kernel still gets its segments ACKed and its keepalives answered by the
proxy's kernel, but nothing reaches the server and nothing comes back. ``stall()``
freezes every connection (new ones are accepted and then frozen too); ``resume()``
forwards again, including what was buffered meanwhile.
"""
from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class StallingProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._forwarding = threading.Event()
        self._forwarding.set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.connections = 0
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "stall-proxy-accept")

    # -- control ------------------------------------------------------------------------
    @property
    def stalled(self) -> bool:
        return not self._forwarding.is_set()

    def stall(self) -> None:
        """Stop forwarding in both directions; every socket stays open."""
        self._forwarding.clear()

    def resume(self) -> None:
        self._forwarding.set()

    def close(self) -> None:
        self._stop.set()
        self._forwarding.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            with contextlib.suppress(OSError):
                s.close()
        for t in self._threads:
            t.join(timeout=2.0)

    def __enter__(self) -> "StallingProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------
    def _spawn(self, target: object, name: str, *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self._upstream, timeout=5.0)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, server]
                self.connections += 1
            self._spawn(self._pump, "stall-proxy-pump", client, server)

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Forward both ways; while stalled, read nothing (the kernels still ACK what fits
        in their buffers, as a middlebox would) and write nothing."""
        peer = {client: server, server: client}
        sel = selectors.DefaultSelector()
        for s in (client, server):
            sel.register(s, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                if not self._forwarding.wait(0.1):
                    continue
                for key, _ in sel.select(0.1):
                    if not self._forwarding.is_set():
                        break
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = src.recv(65536)     # readable: returns at once
                        if not data:
                            return
                        peer[src].sendall(data)
                    except OSError:
                        return
        finally:
            sel.close()
            for s in (client, server):
                with contextlib.suppress(OSError):
                    s.close()
