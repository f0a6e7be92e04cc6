"""`vit train`'s callbacks read a step's logs on the host only at the steps one asks for
(`training.callbacks.StepLogCallbacks`): the NaN check every `loop.check_every` steps, before
each backup and at epoch ends; everything else runs without waiting for the step."""

import keras
import numpy as np
import pytest

from training import callbacks, preemption


class Recorder(keras.callbacks.Callback):
    """Records (batch, logs) at each batch end, and whether it asked for them."""

    def __init__(self, wanted=(), log=None):
        super().__init__()
        self.wanted, self.seen = set(wanted), []
        self.log = log if log is not None else []

    def wants_logs(self, batch):
        return batch in self.wanted

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append((batch, logs))
        self.log.append((id(self), batch))


def _fit(chosen, steps=6, epochs=1, images=None):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((steps * 2, 3), np.float32) if images is None else images
    y = np.zeros((len(x), 1), np.float32)
    model.fit(x, y, batch_size=2, epochs=epochs, verbose=0, shuffle=False,
              callbacks=callbacks.StepLogCallbacks(chosen, model, 0, epochs, steps))
    return model


def test_logs_reach_the_host_only_where_a_callback_wants_them():
    first, second = Recorder(wanted={1}), Recorder(wanted={4})
    _fit([first, second])
    for recorder in (first, second):
        given = [batch for batch, logs in recorder.seen if logs is not None]
        assert given == [1, 4]  # every callback gets what any one asked for
        assert [batch for batch, _ in recorder.seen] == list(range(6))
    loss = dict(first.seen)[1]["loss"]
    assert isinstance(loss, float) and np.isfinite(loss)


def test_callbacks_run_in_their_order_on_the_calling_thread():
    log = []
    chosen = [Recorder(log=log), Recorder(log=log), Recorder(log=log)]
    _fit(chosen, steps=4)
    assert log == [(id(callback), batch) for batch in range(4) for callback in chosen]


def test_which_callbacks_want_every_step():
    class Overrides(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    tensorboard = keras.callbacks.TensorBoard("unused")
    assert not callbacks._wants_logs(tensorboard, 3)  # writes epochs alone by default
    assert callbacks._wants_logs(keras.callbacks.TensorBoard("unused", update_freq=1), 3)
    assert callbacks._wants_logs(Overrides(), 3)  # says nothing: gets every step, as in Keras
    assert not callbacks._wants_logs(keras.callbacks.CSVLogger("unused.csv"), 3)
    assert callbacks._wants_logs(keras.callbacks.TerminateOnNaN(), 3)  # the legacy hook
    assert not preemption.StopOnSignal.wants_logs(None, 3)


def test_nan_check_every_n_steps_and_before_each_backup(tmp_path):
    finite = callbacks.StopOnNonFinite(steps_per_epoch=10, check_every=4)
    backup = callbacks.ResumableBackup(str(tmp_path), steps_per_epoch=10, every_steps=3,
                                       write=False)

    def due(callback, epoch):
        callback.on_epoch_begin(epoch)
        found = []
        for batch in range(10):
            if callback.wants_logs(batch):
                found.append(batch)
            callback.on_train_batch_end(batch, None)
        return found

    assert due(finite, 0) == [3, 7]
    assert due(finite, 1) == [1, 5, 9]  # global steps 11..20: checks at 12, 16, 20
    assert due(backup, 0) == [2, 5, 8]  # global steps 3, 6, 9; the epoch's end has its own
    with pytest.raises(ValueError, match="check_every must be >= 1"):
        callbacks.StopOnNonFinite(10, check_every=0)


def test_a_nan_stops_fit_at_the_first_check_after_it():
    images = np.ones((16, 3), np.float32)
    images[6:8] = np.nan  # the 4th batch of 2
    finite = callbacks.StopOnNonFinite(steps_per_epoch=8, check_every=3)
    with pytest.raises(callbacks.NonFiniteLossError,
                       match=r"step 6 \(global step 6; the loss was finite at the check of "
                             r"global step 3\)"):
        _fit([finite], steps=8, images=images)


def test_a_nan_is_seen_at_the_epoch_end_without_a_check_inside_it():
    images = np.ones((8, 3), np.float32)
    images[2:4] = np.nan
    finite = callbacks.StopOnNonFinite(steps_per_epoch=4, check_every=100)
    with pytest.raises(callbacks.NonFiniteLossError, match=r"step 4 \(global step 4; no "
                                                           r"earlier check\)"):
        _fit([finite], steps=4, images=images)


def test_the_nan_check_holds_its_cadence_when_steps_arrive_several_a_call():
    """With steps_per_execution 3, Keras reports steps 3, 6, 9, 12: a check at each multiple
    of 4 crossed, not only where the step is one."""
    finite = callbacks.StopOnNonFinite(steps_per_epoch=12, check_every=4)
    finite.on_epoch_begin(0)
    checked = []
    for batch in (2, 5, 8, 11):
        if finite.wants_logs(batch):
            checked.append(batch + 1)
        finite.on_train_batch_end(batch, None)
    assert checked == [6, 9, 12]


def test_a_signal_stop_checks_the_loss_before_its_backup(tmp_path):
    """A signal between two NaN checks: the stop reads the loss itself, so its backup never
    holds a NaN step's weights."""
    images = np.ones((16, 3), np.float32)
    images[0:2] = np.nan  # the first step
    finite = callbacks.StopOnNonFinite(steps_per_epoch=8, check_every=100)
    backup = callbacks.ResumableBackup(str(tmp_path / "backup"), steps_per_epoch=8)
    watch = preemption.SignalWatch()
    watch.received = "SIGTERM"
    stop = preemption.StopOnSignal(watch, backup, lambda flag: flag, str(tmp_path),
                                   finite=finite)
    with pytest.raises(callbacks.NonFiniteLossError, match=r"step 1 \(global step 1; no "):
        _fit([finite, backup, stop], steps=8, images=images)
    assert not (tmp_path / "backup").exists()
