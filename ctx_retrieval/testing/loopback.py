"""The loopback HTTP server both API fakes stand on: 127.0.0.1 only, a thread, a quick stop that closes open
connections as a killed server does, and a context manager.

``serve_forever`` checks for shutdown every ``POLL_INTERVAL_S``; the standard library's 0.5 s made every test that
stops a server wait half a second for nothing.
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

POLL_INTERVAL_S = 0.02


class LoopbackHandler(BaseHTTPRequestHandler):
    """Keep-alive (HTTP/1.1), no Nagle delay, no stderr logging, connections tracked for ``stop()``."""

    protocol_version = "HTTP/1.1"
    owner: ClassVar[LoopbackServer]

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner._track(self.connection, open_=True)

    def finish(self) -> None:
        self.owner._track(self.connection, open_=False)
        with contextlib.suppress(OSError):  # closed by stop()
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - silence stderr logging
        return


class _Server(ThreadingHTTPServer):
    # A real API accepts hundreds of connections at once; the standard library's backlog of 5 would refuse a
    # burst of new ones (a run that grows its requests in flight opens many), failing them as connection errors.
    request_queue_size = 1024

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up before its answer was written (a run quitting at a second Ctrl-C, a timeout) is
        the client's choice, not the fake's error: no traceback on stderr, where a test of the client reads it."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """Serves ``handler`` (a ``LoopbackHandler`` subclass; its ``owner`` is this server) on 127.0.0.1, on ``port``
    (0: any free one)."""

    def __init__(self, handler: type[LoopbackHandler], *, name: str, port: int = 0) -> None:
        self.handler = handler
        self.thread_name = name
        self.port_wanted = port
        self._httpd: _Server | None = None
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()

    def _track(self, connection: socket.socket, *, open_: bool) -> None:
        with self._connections_lock:
            (self._connections.add if open_ else self._connections.discard)(connection)

    def start(self) -> Any:
        handler = type(self.handler.__name__, (self.handler,), {"owner": self})
        self._httpd = _Server(("127.0.0.1", self.port_wanted), handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S},
                         name=self.thread_name, daemon=True).start()
        return self

    def stop(self) -> None:
        """Stop as a killed server does: the listening socket and every open connection close."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        self._httpd = None
        with self._connections_lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
                connection.close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        assert self._httpd is not None, "start() the server first"
        return int(self._httpd.server_address[1])

    @property
    def origin(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"
