"""Stopping `vit train` cleanly on SIGTERM or Ctrl+C, so that a preempted run loses nothing.

Spot VMs, Cloud TPU VMs and cluster schedulers stop a job with SIGTERM and a short grace period
(about 30 s); a person stops it with Ctrl+C. While a run trains, the first such signal is a
request: the current step finishes, every process agrees on that step (a collective, so that all
stop at the same one), a backup is written (by the chief; the others into their scratch
folders), and the run ends with `Preempted`, which `vit train` turns into exit status
`EXIT_PREEMPTED` and the command that resumes. A second Ctrl+C aborts at once (status 130). Outside
training (start-up, the final evaluation and export) a signal stops the run at once: nothing is
lost that `--resume` would not redo.

The signal is noticed by a watcher thread woken through `signal.set_wakeup_fd`, so the request
is printed at once even while the main thread waits inside TensorFlow or XLA, and a second
Ctrl+C ends the process without waiting for the step.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import threading
import time

import keras

# sysexits.h EX_TEMPFAIL: a temporary failure; the same command with --resume continues.
EXIT_PREEMPTED = 75
EXIT_ABORTED = 130  # 128 + SIGINT, what a shell reports for a process killed by Ctrl+C
WATCHED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT") if hasattr(signal, name))


class Preempted(Exception):
    """The run stopped on a signal; what it trained is in its backup (when it trained).

    Attributes:
        signal_name: 'SIGTERM' or 'SIGINT' ('' when another process received it).
        resumable: whether the output folder holds a backup to resume from (set by the run).
    """

    def __init__(self, message: str, signal_name: str):
        super().__init__(message)
        self.signal_name, self.resumable = signal_name, False


class SignalWatch:
    """Catches SIGTERM and SIGINT while a run is on (a context manager; the previous handlers
    come back on exit). Only the main thread can watch signals; elsewhere it watches nothing.

    Attributes:
        received: the name of the first signal received ('SIGTERM', 'SIGINT'), else None.
        received_at: `time.monotonic()` when it came.
        stopped: whether `Preempted` was raised for it (it is raised once).
        phase: what the run is doing, for the message (set by the run).
    """

    def __init__(self, print_fd: int = 2):
        self.received: str | None = None
        self.received_at: float | None = None
        self.stopped = False
        self.phase = "start-up"
        self._print_fd = print_fd
        self._deferring = False
        self._lock = threading.Lock()
        self._previous: dict = {}
        self._wakeup = None

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread() or not WATCHED:
            return self
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._wakeup = (reader, writer, signal.set_wakeup_fd(writer.fileno()))
        self.claim()
        threading.Thread(target=self._watch, args=(reader,), daemon=True,
                         name="vit-signal-watch").start()
        return self

    def claim(self) -> None:
        """(Re)installs the handlers: a runtime started later (a cluster's coordination
        service) may have put its own in their place. Does nothing when not watching."""
        if self._wakeup is None:
            return
        for signum in WATCHED:
            previous = signal.signal(signum, self._handle)
            self._previous.setdefault(signum, previous)

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}
        if self._wakeup is not None:
            reader, writer, previous_fd = self._wakeup
            signal.set_wakeup_fd(previous_fd)
            writer.close()  # the watcher thread reads end-of-file and ends
            self._wakeup = None

    @contextlib.contextmanager
    def deferred(self):
        """Inside, a signal only sets `received`: the training loop stops at a step boundary.
        A signal that came just before or during the block ends the run after it."""
        self._check()
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        self._check()

    def _check(self) -> None:
        """Raises `Preempted` once, for the first signal."""
        if self.received is not None and not self.stopped:
            self.stopped = True
            raise Preempted(f"stopped on {self.received} during {self.phase}", self.received)

    def _handle(self, signum, frame) -> None:
        """The Python-level handler (main thread, between bytecodes)."""
        self._record(signum)
        if not self._deferring:
            self._check()

    def _watch(self, reader: socket.socket) -> None:
        """The watcher thread: one byte per signal the process received."""
        count = 0
        with reader:
            while data := reader.recv(64):
                for signum in data:
                    if signum not in WATCHED:
                        continue
                    count += 1
                    self._record(signum)
                    if count > 1 and signum == signal.SIGINT:
                        self._say("vit train: second Ctrl+C: aborting now, without a backup "
                                  "of this step\n")
                        os._exit(EXIT_ABORTED)

    def _record(self, signum: int) -> None:
        """Notes the first signal (the handler and the watcher both see each)."""
        name = signal.Signals(signum).name
        with self._lock:
            if self.received is not None:
                return
            self.received, self.received_at = name, time.monotonic()
        action = "finishing this step, then saving a backup" if self._deferring else "stopping"
        again = "; Ctrl+C again aborts at once" if name == "SIGINT" else ""
        self._say(f"vit train: {name} received: {action}{again}\n")

    def _say(self, text: str) -> None:
        try:
            os.write(self._print_fd, text.encode())
        except OSError:
            pass


class StopOnSignal(keras.callbacks.Callback):
    """Ends `fit` at the first step boundary after a signal, all processes at the same step,
    with a backup of that step.

    Put it right after the `ResumableBackup` it uses (whose backup of this very step, if it wrote
    one, is not written twice).

    Args:
        watch: the run's `SignalWatch`.
        backup: the run's `vit.training.callbacks.ResumableBackup`.
        any_process: function(flag) -> whether any process of the run has `flag` set; a
            collective that every process calls at the same step (`Placement.any_process`).
        backup_dir: the run's backup folder, for the message (the chief's; other processes
            save into scratch folders).
    """

    def __init__(self, watch: SignalWatch, backup, any_process, backup_dir: str):
        super().__init__()
        self.watch, self.backup, self.any_process = watch, backup, any_process
        self.backup_dir = backup_dir

    def on_train_batch_end(self, batch, logs=None):
        if self._agreed():
            self._stop(*self.backup.position(batch))

    def on_epoch_end(self, epoch, logs=None):
        if self._agreed():  # the backup of this epoch's end was just written
            self._stop(epoch + 1, 0)

    def _agreed(self) -> bool:
        return self.any_process(self.watch.received is not None)

    def _stop(self, epoch: int, step: int) -> None:
        self.watch.stopped = True
        writing = time.monotonic()
        self.backup.save_once(epoch, step)
        written = time.monotonic()
        cause = f"on {self.watch.received}" if self.watch.received else \
            "with the other processes (one of them received a signal)"
        where = (f"at epoch {epoch + 1}, step {step}/{self.backup.steps_per_epoch}" if step
                 else f"at the end of epoch {epoch}")
        timing = f" (writing it took {written - writing:.1f} s)"
        if self.watch.received_at is not None:
            timing = (f" {written - self.watch.received_at:.1f} s after the signal (writing it "
                      f"took {written - writing:.1f} s)")
        raise Preempted(f"stopped {cause} {where} (global step "
                        f"{self.backup.global_step(epoch, step)}); backup written to "
                        f"{self.backup_dir}{timing}", self.watch.received or "")


def resume_command(argv: list[str]) -> str:
    """The `vit` command line that continues the run of `argv` (a `vit train ...` argument
    list): the same arguments, without --overwrite, with --resume."""
    kept = [arg for arg in argv if arg != "--overwrite"]
    if not any(arg == "--resume" or arg.startswith("--resume=") for arg in kept):
        kept.append("--resume")
    return shlex.join(["vit", *kept])
