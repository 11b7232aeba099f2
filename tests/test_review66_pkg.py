"""Review 66 of the package, each test written failing first."""

import subprocess
import sys

from labnn.training import checkpoint as ckpt


def test_a_lock_taken_again_inside_its_block_is_held_until_the_outer_one_ends(tmp_path):
    """`train --resume` locks `--out` before reading it, then `Trainer.fit` locks it again:
    the inner block is no second writer, and the lock lasts until the outer block ends."""
    out = tmp_path / "m.pt"
    lock = tmp_path / ".m.pt.lock"
    probe = ("import sys\nfrom labnn.training import checkpoint as ckpt\ntry:\n"
             "    with ckpt.exclusive(sys.argv[1]):\n        print('free')\n"
             "except ckpt.CheckpointBusy:\n    print('busy')\n")

    def other_process_sees():
        return subprocess.run([sys.executable, "-c", probe, str(out)], capture_output=True,
                              text=True, timeout=120).stdout.strip()

    with ckpt.exclusive(out):
        with ckpt.exclusive(out):
            assert lock.exists()
        assert lock.exists() and other_process_sees() == "busy"
    assert not lock.exists() and other_process_sees() == "free"


FIRST_CHECK = """
import math, sys, torch
from labnn.exercises.self_attention import check_attention_weights

def attention_weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)

before = set(sys.modules)
check_attention_weights(attention_weights)
print(sorted(m for m in set(sys.modules) - before if m.startswith(("torch._dynamo",
                                                                   "torch._inductor"))))
"""


def test_the_first_check_of_a_session_imports_no_compiler():
    """The first checker call of a session took 2-6 s, with no output: it imported
    torch._dynamo (and torch._inductor), which torch's meta kernels written in Python and
    every dispatch mode import at their first call; the checkers import it now."""
    run = subprocess.run([sys.executable, "-c", FIRST_CHECK], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "correct" in run.stdout and run.stdout.splitlines()[-1] == "[]", run.stdout
