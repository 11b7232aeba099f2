"""Review 67 of the package, each test written failing first."""

import threading

import pytest
import torch

from labnn.feedback.layer import RelativeBias
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


@pytest.mark.parametrize("s, error", [(-1, ValueError), (2.0, TypeError), (True, TypeError),
                                      (torch.tensor(3), TypeError)])
def test_a_relative_bias_of_a_bad_key_count_is_refused_at_the_door(s, error):
    """`RelativeBias(h, m)(s)` with `s = -1` returned an empty bias, and a float or a tensor
    an error from inside torch.arange."""
    rel = RelativeBias(n_heads=2, max_distance=3)
    with pytest.raises(error, match=r"\bs must be a non-negative int"):
        rel(s)
    with pytest.raises(error, match=r"\bs must be a non-negative int"):
        RelativeBias.lookup(rel.bias, s)


@pytest.mark.parametrize("distance", [[0], [2, 0, 1], [-1]])
def test_distance_zero_is_refused_not_read_as_the_last_entry(distance):
    """Distances start at 1 (the previous step); `at` read distance 0 as index -1, the entry
    of the farthest keys."""
    table = torch.arange(6.0).view(2, 3)
    with pytest.raises(ValueError, match=r"distance must hold distances >= 1 .*got .*"):
        RelativeBias.at(table, torch.tensor(distance))


def test_distances_must_be_integers():
    table = torch.zeros(2, 3)
    with pytest.raises(TypeError, match=r"distance must be a tensor of integer"):
        RelativeBias.at(table, torch.tensor([1.0, 2.0]))
    with pytest.raises(TypeError, match=r"distance must be a tensor of integer"):
        RelativeBias.at(table, [1, 2])
    torch.testing.assert_close(RelativeBias.at(torch.arange(6.0).view(2, 3),
                                               torch.tensor([5, 1, 3])),
                               torch.tensor([[2.0, 0.0, 2.0], [5.0, 3.0, 5.0]]))
