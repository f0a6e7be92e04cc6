"""Stopping `vit train` cleanly on SIGTERM or Ctrl+C, so that a preempted run loses nothing.

Spot VMs, Cloud TPU VMs and cluster schedulers stop a job with SIGTERM and a short grace period
(about 30 s); a person stops it with Ctrl+C. While a run trains, the first such signal is a
request: the current step finishes, every process agrees on that step (a collective, so that all
stop at the same one), a backup is written (by the chief; the others into their scratch
folders), and the run ends with `Preempted`, which `vit train` turns into the command that
resumes and exit status `EXIT_PREEMPTED` (75; 130 for Ctrl+C, so that a loop retrying on 75
stops). A second Ctrl+C aborts at once (130). Outside training (start-up, the final evaluation
and export) a signal stops a single-process run at once, nothing being lost that `--resume`
would not redo; a run of several processes stops at the next point where they all agree (after
start-up, before and after training, after the evaluation), so that none is left waiting in a
collective.

The signal is noticed by a watcher thread woken through `signal.set_wakeup_fd`, so the request
is printed at once even while the main thread waits inside TensorFlow or XLA, a second Ctrl+C
ends the process without waiting for the step, and a stop outside training that the main thread
cannot take within `STUCK_SECONDS` (it is inside a long native call) ends the process.
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
EXIT_ABORTED = 130  # 128 + SIGINT, what a shell reports for a process ended by Ctrl+C
WATCHED = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGINT") if hasattr(signal, name))
STUCK_SECONDS = 3.0


class Preempted(BaseException):
    """The run stopped on a signal; what it trained is in its backup (when it trained).

    A `BaseException`, like `KeyboardInterrupt`: the `except Exception` of a library on the way
    must not swallow it.

    Attributes:
        signal_name: 'SIGTERM' or 'SIGINT' ('' when another process received it).
        resumable: whether the output folder holds this run's backup (set by the run).
    """

    def __init__(self, message: str, signal_name: str):
        super().__init__(message)
        self.signal_name, self.resumable = signal_name, False

    @property
    def exit_status(self) -> int:
        """`EXIT_ABORTED` for Ctrl+C (a person stopped it), else `EXIT_PREEMPTED`."""
        return EXIT_ABORTED if self.signal_name == "SIGINT" else EXIT_PREEMPTED


class SignalWatch:
    """Catches SIGTERM and SIGINT while a run is on (a context manager; the previous handlers
    come back on exit). Only the main thread can watch signals; elsewhere it watches nothing.

    Attributes:
        received: the name of the first signal received ('SIGTERM', 'SIGINT'), else None.
        received_at: `time.monotonic()` when it came.
        stopped: whether `Preempted` was raised for it (it is raised once).
        phase: what the run is doing, for the message (set by the run); None once it is done,
            after which signals are ignored.
        hold: never stop inside the handler, only at `checkpoint`s (a run of several processes,
            which must stop together).
    """

    def __init__(self, print_fd: int = 2):
        self.received: str | None = None
        self.received_at: float | None = None
        self.stopped = False
        self.phase: str | None = "start-up"
        self.hold = False
        self._print_fd = print_fd
        self._deferring = False
        self._lock = threading.RLock()
        self._previous: dict = {}
        self._wakeup = None
        self._timer: threading.Timer | None = None

    def __enter__(self) -> SignalWatch:
        if threading.current_thread() is not threading.main_thread() or not WATCHED:
            return self
        reader, writer = socket.socketpair()
        writer.setblocking(False)
        self._wakeup = (reader, writer, signal.set_wakeup_fd(writer.fileno()))
        for signum in WATCHED:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # e.g. SIGINT of a `cmd &` job
                self._previous[signum] = signal.getsignal(signum)
        self.claim()
        threading.Thread(target=self._watch, args=(reader,), daemon=True,
                         name="vit-signal-watch").start()
        return self

    def claim(self) -> None:
        """(Re)installs the handlers: a runtime started later (a cluster's coordination
        service) may have put its own in their place. Does nothing when not watching."""
        for signum in self._previous:
            signal.signal(signum, self._handle)

    def __exit__(self, *exc_info) -> None:
        for signum, handler in self._previous.items():
            if handler is not None:  # None: installed from C, cannot be put back from Python
                signal.signal(signum, handler)
        self._previous = {}
        if self._timer is not None:
            self._timer.cancel()
        if self._wakeup is not None:
            reader, writer, previous_fd = self._wakeup
            signal.set_wakeup_fd(previous_fd)
            writer.close()  # the watcher thread reads end-of-file and ends
            self._wakeup = None

    def checkpoint(self, any_process=None) -> None:
        """A point where the run may stop: raises `Preempted` (once) when a signal came, here
        or, through `any_process` (a collective every process calls here), to any process.

        Args:
            any_process: function(flag) -> whether `flag` is set on any process; None for a
                run of one process.
        """
        local = self.received is not None
        if self.phase is None or self.stopped or not (
                any_process(local) if any_process is not None else local):
            return
        self.stopped = True
        cause = f"on {self.received}" if local else \
            "with the other processes (one of them received a signal)"
        raise Preempted(f"stopped {cause} during {self.phase}", self.received or "")

    @contextlib.contextmanager
    def deferred(self, any_process=None):
        """Inside, a signal only sets `received`: the training loop stops at a step's end. A
        signal that came before or during the block ends the run at its edges.

        Args:
            any_process: as for `checkpoint`.
        """
        self.checkpoint(any_process)
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        self.checkpoint(any_process)

    def _handle(self, signum, frame) -> None:
        """The Python-level handler (main thread, between bytecodes)."""
        self._record(signum)
        if not (self._deferring or self.hold):
            self.checkpoint()

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
                    if count > 1 and signum == signal.SIGINT and self.phase is not None:
                        self._say("vit train: second Ctrl+C: aborting now, without a backup "
                                  "of this step\n")
                        os._exit(EXIT_ABORTED)

    def _record(self, signum: int) -> None:
        """Notes the first signal (the handler and the watcher both see each)."""
        name = signal.Signals(signum).name
        with self._lock:
            if self.received is not None or self.phase is None:
                return
            self.received, self.received_at = name, time.monotonic()
        waiting = self._deferring or self.hold
        action = "finishing this step, then saving a backup" if self._deferring else \
            "stopping with the other processes" if self.hold else "stopping"
        again = "; Ctrl+C again aborts at once" if name == "SIGINT" else ""
        self._say(f"vit train: {name} received: {action}{again}\n")
        if not waiting:
            self._timer = threading.Timer(STUCK_SECONDS, self._exit_if_stuck)
            self._timer.daemon = True
            self._timer.start()

    def _exit_if_stuck(self) -> None:
        """Ends the process when the main thread, inside a native call, has not stopped."""
        if self.stopped or self._deferring or self.hold or self.phase is None:
            return
        self._say(f"vit train: still inside {self.phase} after {STUCK_SECONDS:.0f} s "
                  "(a native call): exiting now; nothing trained since the last backup is "
                  "lost\n")
        os._exit(EXIT_ABORTED if self.received == "SIGINT" else EXIT_PREEMPTED)

    def _say(self, text: str) -> None:
        try:
            os.write(self._print_fd, text.encode())
        except OSError:
            pass


class StopOnSignal(keras.callbacks.Callback):
    """Ends `fit` at the first step boundary after a signal, all processes at the same step,
    with a backup of that step.

    Put it after the `ResumableBackup` it uses (whose backup of this very step, if it wrote
    one, is not written twice), and last, so that the callbacks before it see the epoch's end.

    Args:
        watch: the run's `SignalWatch`.
        backup: the run's `training.callbacks.ResumableBackup`.
        any_process: function(flag) -> whether any process of the run has `flag` set; a
            collective that every process calls at the same step (`Placement.any_process`).
        backup_dir: the run's backup folder, for the message (the chief's; other processes
            save into scratch folders).
        finite: the run's `training.callbacks.StopOnNonFinite`, which checks the loss before
            a mid-epoch stop's backup (its own checks run every few steps only), or None.
    """

    def __init__(self, watch: SignalWatch, backup, any_process, backup_dir: str,
                 finite=None):
        super().__init__()
        self.watch, self.backup, self.any_process = watch, backup, any_process
        self.backup_dir, self.finite = backup_dir, finite

    def wants_logs(self, batch: int) -> bool:
        """False: a signal is a host flag (`training.callbacks.StepLogCallbacks`); a stop reads
        the loss itself."""
        return False

    def on_train_batch_end(self, batch, logs=None):
        epoch, step = self.backup.position(batch)
        if step >= self.backup.steps_per_epoch:
            return  # the epoch's end comes next: stop there, after its backup and validation
        if self._agreed():
            if self.finite is not None:  # every process, after the collective: same loss
                self.finite.check_now(batch, logs)
            self._stop(epoch, step)

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
    """The `vit` command line that continues a run.

    Args:
        argv: the run's arguments after `vit` (`['train', ...]`).

    Returns:
        The same command, quoted for a POSIX shell, without --overwrite and with --resume
        (as given when it was there: `--resume auto` stays).
    """
    def spells(arg: str, flag: str) -> bool:  # argparse takes unique prefixes: --overw
        return len(arg) > 4 and flag.startswith(arg.split("=", 1)[0])

    kept = [arg for arg in argv if not spells(arg, "--overwrite")]
    if not any(spells(arg, "--resume") for arg in kept):
        kept.append("--resume")
    return shlex.join(["vit", *kept])
