"""The command line and trainer after stop 63's second trial, each test written failing
first: a bad `--set` value exited 2 when it did not parse (`mem_len=null`) but 1 when the
config refused it (`mem_len=-1`)."""

import pytest

from test_cli import TINY, cli, one_line_error


@pytest.mark.parametrize("model, pair, needle", [
    ("xl", "mem_len=null", "expected an int"),  # does not parse as the field's type
    ("xl", "mem_len=-1", "non-negative"),  # parses; the config refuses it
    ("transformer", "d_ff=-4", "positive"),
    ("transformer", "positions=rotary", "learned"),
    ("feedback-kv", "shared_kv=false", "True"),
])
def test_a_bad_set_value_exits_2_whichever_way_it_is_wrong(capsys, tmp_path, model, pair,
                                                           needle):
    out = tmp_path / "m.pt"
    code, _, err = cli(capsys, "train", "--model", model, "--iters", "1", *TINY,
                       "--set", pair, "--out", str(out))
    line = one_line_error(code, err, f"--set {pair}", needle)
    assert code == 2, (code, line)
    assert not out.exists()


def test_sizes_the_config_refuses_exit_2_as_argparse_refusals_do(capsys, tmp_path):
    """`--d-model 0` is argparse's (2); `--d-model 30 --n-heads 4` the config's: the same."""
    flags = [*TINY, "--d-model", "30", "--n-heads", "4"]
    code, _, err = cli(capsys, "train", "--iters", "1", *flags, "--out", str(tmp_path / "m"))
    line = one_line_error(code, err, "--d-model 30", "--n-heads 4")
    assert code == 2, (code, line)
