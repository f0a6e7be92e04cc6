"""A loopback HTTP file server for download tests: serves bytes by path, records requests, and
can misbehave on purpose (truncate or stall a body, hold responses until several clients wait)."""

import contextlib
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

WAIT_SECONDS = 60  # a barrier never holds a response longer than this


class WeightsServer:
    """Files by URL path on 127.0.0.1; `url` is its base address.

    Attributes:
        files: path -> bytes served with 200 (anything else is a 404).
        headers: path -> extra response headers.
        truncated: paths whose body is cut in half (Content-Length still announces it whole).
        stalled: paths whose body stops after half, the connection held open until `stop`.
        barrier: when set, every request waits on it before answering.
        requests: (method, path) of every request, in order.
    """

    def __init__(self):
        self.files, self.headers, self.truncated, self.stalled = {}, {}, set(), set()
        self.stopping = threading.Event()
        self.barrier = None
        self.requests = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._http.daemon_threads = True
        self._http.owner = self
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._http.server_address
        return f"http://{host}:{port}"

    def gets(self, path: str) -> int:
        """How many GET requests `path` has had."""
        return sum(1 for method, requested in self.requests
                   if method == "GET" and requested == path)

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self.stopping.set()
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=10)


class _Handler(BaseHTTPRequestHandler):
    timeout = WAIT_SECONDS

    def do_GET(self):  # noqa: N802 (http.server's naming)
        self._answer(with_body=True)

    def do_HEAD(self):  # noqa: N802
        self._answer(with_body=False)

    def _answer(self, with_body: bool):
        server = self.server.owner
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        server.requests.append((self.command, path))
        if server.barrier is not None:
            server.barrier.wait(timeout=WAIT_SECONDS)
        data = server.files.get(path)
        if data is None:
            self.send_error(404, "Not Found")
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        for name, value in server.headers.get(path, {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not with_body:
            return
        if path in server.stalled:
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            server.stopping.wait(WAIT_SECONDS)
            self.close_connection = True
            return
        if path in server.truncated:
            self.wfile.write(data[:len(data) // 2])
            self.close_connection = True
            return
        self.wfile.write(data)

    def log_message(self, *args):  # keep test output clean
        pass


@contextlib.contextmanager
def serving():
    """A started `WeightsServer`, stopped on exit."""
    server = WeightsServer().start()
    try:
        yield server
    finally:
        server.stop()
