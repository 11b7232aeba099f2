"""`labnn.training.timing`: the notebooks' clock counts this process's work on a CPU with
one thread, so that other jobs on a shared machine do not move their timing claims."""

import os
import platform
import threading
import time

import pytest
import torch

from labnn.training import timing


def test_on_one_cpu_thread_the_clock_ignores_time_spent_waiting(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    clock = timing.clock(torch.device("cpu"))
    start = clock()
    time.sleep(0.2)  # another job holding the core looks like this to us
    assert clock() - start < 0.05


def test_with_several_threads_or_on_a_gpu_the_clock_is_wall_time(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    assert timing.clock(torch.device("cpu")) is time.perf_counter
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert timing.clock(torch.device("cuda")) is time.perf_counter


def test_times_warms_up_then_times_each_call(monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    calls = []

    def work():
        calls.append(threading.get_ident())
        time.sleep(0.01)

    got = timing.times(work, torch.device("cpu"), repeats=3)
    assert len(calls) == 4 and len(got) == 3  # one warm-up call, not timed
    assert all(0.009 < t < 0.5 for t in got)
    assert len(timing.times(work, torch.device("cpu"), repeats=2, warmup=0)) == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"repeats": 0}, "repeats must be a positive int, got 0"),
    ({"warmup": -1}, "warmup must be a non-negative int, got -1"),
])
def test_times_names_bad_counts(kwargs, match):
    with pytest.raises(ValueError, match=match):
        timing.times(lambda: None, torch.device("cpu"), **kwargs)


def test_the_task_loops_time_with_the_clock_of_their_device(monkeypatch):
    """05's 'the windowed transformer trains fastest per step' failed while another notebook
    shared the two cores (window 23 ms, XL 23 ms): the loops timed wall time."""
    from labnn.data.recall import RecallVocab, recall_batches
    from labnn.training import tasks
    from labnn.transformer import TransformerConfig, TransformerLM

    asked = []
    real = timing.clock

    def recording(device):
        asked.append(device)
        return real(device)

    monkeypatch.setattr(tasks.timing, "clock", recording)
    torch.manual_seed(0)
    vocab = RecallVocab(n_values=4, n_filler=2)
    model = TransformerLM(TransformerConfig(vocab_size=vocab.vocab_size, seq_len=8, d_model=8,
                                            n_heads=2, n_layers=1))
    tasks.train_recall(model, recall_batches(2, 2, 8, vocab, seed=0), lr=1e-3)
    assert asked == [torch.device("cpu")]


def test_machine_names_the_cpu_its_threads_and_torch(monkeypatch):
    """The line printed beside figures: the processor, cores, torch threads, torch."""
    from labnn.training.timing import machine

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        line = machine(torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    assert f"{os.cpu_count()} cores, 1 torch thread, torch {torch.__version__}" in line, line
    assert line.split(" (")[0] and "(" + platform.machine() + ")" in line, line


def test_machine_names_the_gpu_its_cuda_and_tf32(monkeypatch):
    """On a GPU: its name, CUDA's version and whether float32 products may use TF32."""
    from labnn.training.timing import machine

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    try:
        for allowed, said in ((True, "on"), (False, "off")):
            matmul.allow_tf32 = allowed
            assert machine(torch.device("cuda")) == (
                f"NVIDIA H200, CUDA 13.0, TF32 {said}, torch {torch.__version__}")
    finally:
        matmul.allow_tf32 = before


def test_clock_says_what_it_counts(monkeypatch):
    """A figure printed beside a progress bar (wall time) names its clock: a CPU-time figure
    of 39 s under a bar of 56 s read as a contradiction."""
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert timing.clock_name(torch.device("cpu")) == "CPU time"
    assert timing.clock_name(torch.device("cuda")) == "wall time"
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    assert timing.clock_name(torch.device("cpu")) == "wall time"


def test_machine_short_titles_a_figure_of_timings(monkeypatch):
    """A figure of timings names where it was measured in its own title (it may be seen
    without the notebook's first cell): the GPU's name, or the CPU's cores and threads."""
    from labnn.training.timing import machine_short

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "NVIDIA H200")
    assert machine_short(torch.device("cuda")) == "NVIDIA H200"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        assert machine_short(torch.device("cpu")) == f"CPU, {os.cpu_count()} cores, 2 torch threads"
        assert machine_short(torch.device("meta")).startswith("meta on CPU, ")
    finally:
        torch.set_num_threads(threads)
