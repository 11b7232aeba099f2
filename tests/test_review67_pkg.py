"""Review 67 of the package, each test written failing first."""

import threading

import pytest

from labnn.training import checkpoint as ckpt


def test_a_second_thread_of_the_process_that_holds_a_lock_is_refused(tmp_path):
    """The lock was re-entrant for the whole process (its pid in the lock file): a notebook
    training in a background thread and calling `fit` again in its main thread on the same
    checkpoint had two writers, each save replacing the other's. Only the thread that holds
    it takes it again now."""
    out, held, done = tmp_path / "m.pt", threading.Event(), threading.Event()

    def hold():
        with ckpt.exclusive(out):
            held.set()
            done.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(60)
        with pytest.raises(ckpt.CheckpointBusy, match="another thread of this process"):
            with ckpt.exclusive(out):
                pass
    finally:
        done.set()
        holder.join(60)
    with ckpt.exclusive(out):  # free again once that thread's block ended
        with ckpt.exclusive(out):  # and still re-entrant in one thread
            pass
