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
