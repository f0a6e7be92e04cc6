"""Helpers for tests that start local servers: multi-worker clusters, `vit serve`."""

import contextlib
import socket
import threading
import time


def free_ports(count):
    """`count` TCP ports on 127.0.0.1 that were free a moment ago."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


@contextlib.contextmanager
def served(app):
    """Runs an ASGI `app` with uvicorn on a free loopback port in a background thread.

    Yields:
        The base URL, e.g. http://127.0.0.1:40123. The server stops when the block ends.
    """
    import uvicorn

    # log_config=None: the test process keeps its logging as it is.
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_config=None,
                                           access_log=False))
    thread = threading.Thread(target=server.run, name="test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
