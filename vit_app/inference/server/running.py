"""Running the app until SIGTERM or Ctrl+C, then draining: what `vit serve` does in the
foreground.

On the first SIGTERM or Ctrl+C the server stops accepting connections, answers the requests
already in flight for up to `drain_seconds`, stops the batcher and returns, so that `vit serve`
exits with status 0 (a Kubernetes pod or a systemd unit being stopped sees a clean exit). A
second signal stops waiting for the requests (Python 3.12's asyncio still waits for their
connections to close; `drain_seconds` bounds the wait in any case).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import uvicorn

STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT")
                     if hasattr(signal, name))


class DrainingServer(uvicorn.Server):
    """uvicorn's server, stopping as the module docstring says (uvicorn's own handling sends
    the signal again once it has shut down, so the process would end by it)."""

    @contextlib.contextmanager
    def capture_signals(self):
        """Handles SIGTERM and SIGINT while the server runs (main thread only), then puts the
        previous handlers back, without sending the signal again."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.signal(signum, self._on_signal) for signum in STOP_SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _on_signal(self, signum, frame) -> None:
        name = signal.Signals(signum).name
        if self.should_exit:
            self.force_exit = True
            _say(f"vit serve: {name} again: closing the connections still open\n")
            return
        self.should_exit = True
        _say(f"vit serve: {name}: no new connections; answering the requests in flight (up to "
             f"{self.config.timeout_graceful_shutdown} s), then exiting\n")


def _say(text: str) -> None:
    """Writes to stderr without Python's buffered streams (safe inside a signal handler)."""
    try:
        os.write(2, text.encode())
    except OSError:
        pass


def run_until_stopped(app, host: str, port: int, *, drain_seconds: int,
                      keep_alive_seconds: float = 75.0, verbose: bool = False) -> None:
    """Serves `app` on host:port until SIGTERM or Ctrl+C, then drains (see the module).

    Args:
        app: the ASGI application (`create_app`).
        host: the address to listen on.
        port: the TCP port.
        drain_seconds: the longest wait for requests in flight after the signal.
        keep_alive_seconds: how long an idle keep-alive connection stays open. Above the
            idle timeout of what sits in front, so that the server never closes a connection
            at the moment a client reuses it.
        verbose: uvicorn's info log and access log.
    """
    config = uvicorn.Config(app, host=host, port=port, log_level="info" if verbose else
                            "warning", access_log=verbose, server_header=False,
                            timeout_graceful_shutdown=drain_seconds,
                            timeout_keep_alive=keep_alive_seconds)
    DrainingServer(config).run()
