"""Real receivers for alert deliveries: a local HTTP server and an SMTP server (aiosmtpd)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class HttpReceiver:
    url: str
    requests: list[Received] = field(default_factory=list)
    status: int = 200
    delay_s: float = 0.0


@contextmanager
def http_receiver(status: int = 200, delay_s: float = 0.0) -> Iterator[HttpReceiver]:
    receiver = HttpReceiver(url="", status=status, delay_s=delay_s)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            receiver.requests.append(Received(self.path, dict(self.headers.items()), body))
            if receiver.delay_s:
                time.sleep(receiver.delay_s)
            try:
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:
                pass  # the client gave up (slow receiver test)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hooks/T0KEN-secret-path"
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


@dataclass
class SmtpReceiver:
    host: str
    port: int
    messages: list[Any] = field(default_factory=list)


@contextmanager
def smtp_receiver() -> Iterator[SmtpReceiver]:
    from aiosmtpd.controller import Controller
    from aiosmtpd.handlers import Message

    with socket.socket() as sock:  # aiosmtpd needs a concrete port to check its own start
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    received = SmtpReceiver("127.0.0.1", port)

    class Collect(Message):
        def handle_message(self, message: Any) -> None:
            received.messages.append(message)

    controller = Controller(Collect(), hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield received
    finally:
        controller.stop()
