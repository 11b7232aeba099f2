"""The command line's loose ends from trial 49 (each test written failing first)."""

from test_cli import cli, one_line_error


def test_a_misspelt_option_is_reported_by_its_command_with_the_nearest_one(capsys):
    """`train --iter 5` was reported by the top-level parser ("python -m labnn: error:
    unrecognized arguments"), with the usage of the wrong command and no hint."""
    code, _, err = cli(capsys, "train", "--iter", "5")
    line = one_line_error(code, err, "python -m labnn train: error:", "--iter",
                          "did you mean --iters?", "python -m labnn train --help")
    assert code == 2, line
    code, _, err = cli(capsys, "sample", "--checkpoint", "x.pt", "--temprature", "0.5")
    one_line_error(code, err, "python -m labnn sample: error:", "--temprature",
                   "did you mean --temperature?")


def test_an_unknown_option_with_nothing_near_it_names_help_only(capsys):
    code, _, err = cli(capsys, "train", "--zzzzzz")
    line = one_line_error(code, err, "python -m labnn train: error:", "--zzzzzz")
    assert "did you mean" not in line
    code, _, err = cli(capsys, "train", "stray")
    one_line_error(code, err, "python -m labnn train: error:", "stray")


def test_an_option_of_the_other_command_says_whose_it_is(capsys):
    """`train --tokens 5` was answered "did you mean --iters?" and `sample --model xl`
    "did you mean --help?" (stop 55's CLI trial): the option exists, on the other command."""
    code, _, err = cli(capsys, "train", "--tokens", "5")
    line = one_line_error(code, err, "python -m labnn train: error:",
                          "--tokens (an option of `sample`, not of `train`)")
    assert "did you mean" not in line and code == 2, line
    code, _, err = cli(capsys, "sample", "--checkpoint", "x.pt", "--model", "xl")
    line = one_line_error(code, err, "python -m labnn sample: error:",
                          "--model (an option of `train`, not of `sample`)")
    assert "did you mean" not in line, line
    code, _, err = cli(capsys, "sample", "--checkpoint", "x.pt", "--lr=0.1", "--iter", "3")
    one_line_error(code, err, "--lr=0.1 (an option of `train`, not of `sample`)", "--iter")
