"""Admission at the door: how much work `vit serve` holds at once, and how long a request may
wait for the model.

A server that queues whatever comes answers everyone late once the load passes what it can
do: latency grows with the queue and clients time out. So a predict request is refused with
503 and `Retry-After` at once, before its body is read, while
- `limit` requests are in the server (being read, decoded, waiting or in the model), or
- a request let in now would wait more than half of `max_wait_ms` for the model: the
  requests waiting times the pace at which they reach the model (measured while some wait),
  or the time the oldest has waited beyond the batching window, passes it. Letting it in would cost the work of
  reading, parsing and decoding it, for a refusal later: work the answered requests need.
An admitted request that has not reached the model `max_wait_ms` after it arrived is answered
503 too, rather than late, so that answered requests take about `max_wait_ms` plus one model
call at most, whatever the load and whatever the model's speed.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import json
import time
from typing import Callable

RETRY_AFTER_S = 1  # what a refused client is told to wait (HTTP allows whole seconds)
PACE_WINDOW = 64  # the latest intervals between requests reaching the model, while some wait


class Busy(Exception):
    """The server refuses this request for now; the client should retry after `RETRY_AFTER_S`."""


@dataclasses.dataclass
class Ticket:
    """One admitted request.

    Attributes:
        deadline: `time.monotonic()` seconds by which it must reach the model.
        started: call when its model call begins (it no longer counts as waiting).
    """

    deadline: float
    started: Callable[[], None]


class Admission:
    """Counts the requests in the server and refuses new ones as the module says.

    Args:
        limit: most requests in the server at once (`vit serve --queue-size`).
        max_wait_ms: longest time a request may take to reach the model
            (`vit serve --max-wait-ms`).
        batch_window_ms: how long a request may wait on purpose, for others to share its
            model call (`vit serve --batch-timeout-ms`): not a sign of overload.
    """

    def __init__(self, limit: int, max_wait_ms: float, batch_window_ms: float = 0.0):
        if limit < 1:
            raise ValueError(f"the admission limit must be >= 1, got {limit}")
        if max_wait_ms <= 0:
            raise ValueError(f"max_wait_ms must be > 0, got {max_wait_ms}")
        self.limit, self.max_wait_s = limit, max_wait_ms / 1000.0
        self.batch_window_s = batch_window_ms / 1000.0
        self.held = 0  # requests admitted and not answered yet
        self.refused = 0  # since the start, at the door
        self.expired = 0  # since the start, admitted but too late for the model
        self._waiting: dict[int, float] = {}  # ticket number -> arrival, oldest first
        self._numbers = itertools.count()
        self._intervals: collections.deque[float] = collections.deque(maxlen=PACE_WINDOW)
        self._last_start: float | None = None  # when a request last reached the model behind
        # others; None when none was waiting then

    def expected_wait_s(self) -> float:
        """How long a request arriving now would wait for the model, as far as is known."""
        if not self._waiting:
            return 0.0
        oldest = time.monotonic() - next(iter(self._waiting.values())) - self.batch_window_s
        pace = sum(self._intervals) / len(self._intervals) if self._intervals else 0.0
        return max(oldest, len(self._waiting) * pace)

    def refuse(self) -> Busy | None:
        """The refusal of a request arriving now, counted, or None to admit it."""
        reason = self.refusal()
        if reason is None:
            return None
        self.refused += 1
        return Busy(reason)

    def refusal(self) -> str | None:
        """Why a request arriving now is refused, or None to admit it."""
        if self.held >= self.limit:
            return f"{self.limit} requests are in the server already (vit serve --queue-size)"
        expected = self.expected_wait_s()
        if expected > self.max_wait_s / 2:
            return (f"a request now would wait about {1000 * expected:.0f} ms for the model, "
                    f"over half of vit serve --max-wait-ms {1000 * self.max_wait_s:g}")
        return None

    @contextlib.contextmanager
    def admit(self):
        """Holds one place while the block runs.

        Yields:
            The request's `Ticket`.

        Raises:
            Busy: the request is refused (see `refusal`).
        """
        busy = self.refuse()
        if busy:
            raise busy
        number, arrived = next(self._numbers), time.monotonic()
        self.held += 1
        self._waiting[number] = arrived
        try:
            yield Ticket(arrived + self.max_wait_s, lambda: self._reached_model(number))
        finally:
            self.held -= 1
            self._waiting.pop(number, None)

    def _reached_model(self, number: int) -> None:
        """Ticket `number` reached the model: measures the pace while others wait."""
        if self._waiting.pop(number, None) is None:
            return
        now = time.monotonic()
        if self._last_start is not None:
            self._intervals.append(now - self._last_start)
        self._last_start = now if self._waiting else None

    def expire(self, ticket: Ticket) -> Busy:
        """The refusal of an admitted request that did not reach the model by its deadline."""
        self.expired += 1
        waited_s = time.monotonic() - ticket.deadline + self.max_wait_s
        return Busy(f"the request waited {1000 * waited_s:.0f} ms without reaching the model "
                    f"(vit serve --max-wait-ms {1000 * self.max_wait_s:g})")

    def figures(self) -> dict:
        """What /healthz reports: in the server now, the limit, refusals since the start."""
        return {"in_server": self.held, "limit": self.limit, "refused": self.refused,
                "expired": self.expired}


def busy_message(busy: Busy) -> str:
    """The text of a 503 answer."""
    return f"the server is busy ({busy}); retry after {RETRY_AFTER_S} s"


class Door:
    """ASGI middleware that refuses work while `admission` says so, before the request reaches
    routing or its body is read: under overload most requests are refused, and each refusal
    must cost the one core little.

    Args:
        app: the application behind the door.
        admission: the server's `Admission`.
        is_work: whether a (method, path) is work the admission counts (a prediction).
    """

    def __init__(self, app, admission: Admission, is_work: Callable[[str, str], bool]):
        self.app, self.admission, self.is_work = app, admission, is_work

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.is_work(scope["method"], scope["path"]):
            busy = self.admission.refuse()
            if busy:
                await _send_busy(send, busy)
                return
        await self.app(scope, receive, send)


async def _send_busy(send, busy: Busy) -> None:
    body = json.dumps({"error": busy_message(busy)}).encode()
    await send({"type": "http.response.start", "status": 503, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode())]})
    await send({"type": "http.response.body", "body": body})
