"""A TCP proxy on loopback whose connections can go half-open, for the timeout tests.

It plays the middlebox of a half-open connection (a NAT, a proxy, a dead route): a
connection it freezes is never forwarded again in either direction, yet both of its
sockets stay open, so the client's kernel still gets its segments ACKed and its
keepalives answered (by the proxy's kernel) while no reply ever comes.

* ``stall()``: every open connection is frozen for good, and so is every connection
  accepted until ``resume()`` (the route is dead); connections made after ``resume()``
  forward normally (a new route), the frozen ones stay frozen.
* ``thaw()``: every connection forwards again, the frozen ones too (a pause, not a cut).
* ``cut()``: an outage: every open connection is closed and every new one is closed as soon
  as it is accepted (the server is gone), until ``restore()``.
* ``freeze_on(pattern)``: a connection whose client sends bytes containing ``pattern``
  is frozen before those bytes are forwarded (only the connection carrying, say, a
  completion goes half-open; the others stay healthy).
"""
from __future__ import annotations

import contextlib
import selectors
import socket
import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    server: socket.socket
    frozen: threading.Event = field(default_factory=threading.Event)


class StallingProxy:
    def __init__(self, upstream_host: str, upstream_port: int) -> None:
        self._upstream = (upstream_host, upstream_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port: int = self._listener.getsockname()[1]
        self._stalled = False
        self._cut = False
        self._patterns: list[bytes] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pairs: list[_Pair] = []
        self.accepted = 0
        self.frozen = 0
        self._threads: list[threading.Thread] = []
        self._spawn(self._accept_loop, "stall-proxy-accept")

    # -- control ------------------------------------------------------------------------
    def stall(self) -> None:
        """Freeze every open connection for good, and every new one until resume()."""
        with self._lock:
            self._stalled = True
            for pair in self._pairs:
                self._freeze(pair)

    def resume(self) -> None:
        """New connections forward again (frozen ones never do)."""
        with self._lock:
            self._stalled = False

    def thaw(self) -> None:
        """Forward again on every connection, the frozen ones included (a link that paused
        and came back: what was sent meanwhile is delivered late, nothing is lost). Only for
        connections frozen by stall(): freeze_on() dropped the bytes that froze its own."""
        with self._lock:
            self._stalled = False
            for pair in self._pairs:
                pair.frozen.clear()

    def cut(self) -> None:
        """Close every open connection, and every new one at once until restore()."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in (pair.client, pair.server):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def restore(self) -> None:
        """New connections reach the server again (after cut())."""
        with self._lock:
            self._cut = False

    def freeze_on(self, pattern: bytes) -> None:
        """Freeze any connection whose client sends ``pattern`` (before forwarding it)."""
        with self._lock:
            self._patterns.append(pattern)

    def stop_freezing(self) -> None:
        """Forget the freeze_on patterns (frozen connections stay frozen)."""
        with self._lock:
            self._patterns.clear()

    def close(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for t in self._threads:
            t.join(timeout=2.0)
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in (pair.client, pair.server):
                with contextlib.suppress(OSError):
                    s.close()

    def __enter__(self) -> "StallingProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing -----------------------------------------------------------------------
    def _freeze(self, pair: _Pair) -> None:
        if not pair.frozen.is_set():
            pair.frozen.set()
            self.frozen += 1

    def _spawn(self, target: object, name: str, *args: object) -> None:
        t = threading.Thread(target=target, args=args, name=name, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                cut = self._cut
            if cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self._upstream, timeout=5.0)
            except OSError:
                client.close()
                continue
            client.settimeout(None)
            server.settimeout(None)
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
                self.accepted += 1
                if self._stalled:
                    self._freeze(pair)
            self._spawn(self._pump, "stall-proxy-pump", pair)

    def _matches(self, data: bytes) -> bool:
        with self._lock:
            return any(p in data for p in self._patterns)

    def _pump(self, pair: _Pair) -> None:
        """Forward both ways until either side closes; a frozen pair reads and writes
        nothing more (the kernels ACK what fits in their buffers, as a middlebox's would)."""
        peer = {pair.client: pair.server, pair.server: pair.client}
        sel = selectors.DefaultSelector()
        for s in peer:
            sel.register(s, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                if pair.frozen.is_set():
                    self._stop.wait(0.1)
                    continue
                for key, _ in sel.select(0.1):
                    if pair.frozen.is_set():
                        break
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = src.recv(65536)     # readable: returns at once
                        if not data:
                            return
                        if src is pair.client and self._matches(data):
                            with self._lock:
                                self._freeze(pair)
                            break                  # dropped, as a dead route would
                        peer[src].sendall(data)
                    except OSError:
                        return
        finally:
            sel.close()
            if not pair.frozen.is_set():           # a frozen pair keeps its sockets open until close()
                for s in peer:
                    with contextlib.suppress(OSError):
                        s.close()
