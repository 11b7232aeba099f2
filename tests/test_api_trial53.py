"""Trial 53g: a PyTorch user on labnn's compiled generation, data, plots, checkpoints and
command line. Each test was written failing, from what the trial found: a colour scale
that a masked score collapsed, a malformed `--set` with the exit status of a run that
failed, raw torch errors where one line naming the argument belongs, a read-only
checkpoint replaced.
"""

import os
import stat

import matplotlib
import pytest
import torch

matplotlib.use("Agg")

from labnn.data.batching import random_batch, stream_batch  # noqa: E402
from labnn.data.recall import accuracy_by_distance, recall_batches  # noqa: E402
from labnn.plot import attention_heads, attention_heatmap  # noqa: E402
from labnn.training import checkpoint as ckpt  # noqa: E402
from test_cli import cli, one_line_error  # noqa: E402


def test_masked_scores_keep_their_colour_scale():
    """Raw causal scores hold -inf (and a NaN may come): the scale fell to (-0.1, 0.1),
    every finite score drawn saturated."""
    s = torch.randn(4, 4).masked_fill(torch.ones(4, 4, dtype=torch.bool).triu(1),
                                      float("-inf"))
    finite = s[s.isfinite()]
    want = (float(finite.min()), float(finite.max()))
    assert attention_heatmap(s, annotate=True).images[0].get_clim() == pytest.approx(want)
    heads = attention_heads(s[None].repeat(2, 1, 1))
    assert heads.axes[0].images[0].get_clim() == pytest.approx(want)
    nan = torch.tensor([[0.5, float("nan")], [0.2, 0.8]])
    assert attention_heatmap(nan).images[0].get_clim() == pytest.approx((0.0, 0.8))


@pytest.mark.parametrize("pair", ["d_ff=1.5", "nosuch=1", "d_ff"])
def test_a_malformed_set_option_exits_2_as_any_malformed_option(capsys, pair):
    """The CLI's docstring: 2 for malformed options, 1 otherwise; `--set d_ff=1.5` gave 1."""
    code, _, err = cli(capsys, "train", "--iters", "1", "--set", pair)
    one_line_error(code, err, f"--set")
    assert code == 2, err


def test_recall_batches_names_a_bad_length_or_seed():
    with pytest.raises(ValueError, match=r"seq_len"):
        recall_batches(2, 2, 1)
    with pytest.raises(ValueError, match=r"seq_len"):
        recall_batches(2, 2, 2.5)
    with pytest.raises(ValueError, match=r"seed must be"):
        recall_batches(2, 2, 8, seed=1.5)


def test_data_helpers_name_their_argument():
    ids = torch.arange(50)
    with pytest.raises(ValueError, match=r"max_distance must be a positive int, got True"):
        accuracy_by_distance(torch.zeros(1, 4, 3), torch.zeros(1, 4, dtype=torch.long), True)
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator"):
        random_batch(ids, 2, 4, 0)
    with pytest.raises(ValueError, match=r"index must be an int"):
        stream_batch(ids, 2, 4, 1.0)


def test_a_bad_map_location_is_not_called_an_unreadable_file(tmp_path):
    path = tmp_path / "a.pt"
    ckpt.save_atomic({"w": torch.ones(1)}, path)
    with pytest.raises((ValueError, TypeError), match=r"map_location must be a device .*got 3.5"):
        ckpt.load(path, map_location=3.5)


@pytest.mark.skipif(not hasattr(os, "chmod"), reason="file modes")
def test_save_atomic_leaves_a_read_only_checkpoint_alone(tmp_path):
    """A write-protected checkpoint was replaced (and kept its read-only mode)."""
    path = tmp_path / "a.pt"
    ckpt.save_atomic({"w": torch.ones(1)}, path)
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    try:
        with pytest.raises(PermissionError, match=r"read-only"):
            ckpt.save_atomic({"w": torch.zeros(1)}, path)
        assert ckpt.load(path)["w"].item() == 1.0
    finally:
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
