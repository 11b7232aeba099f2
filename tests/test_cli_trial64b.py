"""The command line's usage mistakes that argparse named without the way out (stop 64,
written failing first): a command of another name (`generate`, `eval`, a misspelt
`sampel`), and `sample`'s checkpoint given without `--checkpoint`."""

import pytest

from test_cli import cli, one_line_error


@pytest.mark.parametrize("word, hint", [
    ("generate", "did you mean sample?"),
    ("sampel", "did you mean sample?"),
    ("trian", "did you mean train?"),
    ("eval", "train evaluates at every --eval-interval"),
])
def test_another_command_name_gets_the_nearest(capsys, word, hint):
    code, _, err = cli(capsys, word)
    assert code == 2
    one_line_error(code, err, f"invalid choice: '{word}'", hint)


def test_sample_checkpoint_without_its_option_is_named(capsys):
    code, _, err = cli(capsys, "sample", "m.pt")
    assert code == 2
    one_line_error(code, err, "m.pt", "--checkpoint m.pt")
