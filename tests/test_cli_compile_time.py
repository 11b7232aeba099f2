"""What `python -m labnn sample --compile` says about compiling: the figures measured
(docs/benchmarks.md: 18-22 s on a 2-core CPU with inductor's cache empty, 3-7 s with it warm),
not a range no run gave ("8-20 s" fitted neither a cold nor a warm compile)."""

from labnn.cli import main
from labnn.cli import commands

TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--seq-len", "8", "--batch-size", "2",
        "--eval-interval", "2", "--eval-iters", "1", "--device", "cpu"]


def said_right(text):
    return "about 20 s" in text and "a few seconds" in text and "8-20" not in text


def test_the_help_of_compile_gives_the_measured_compile_times():
    parser = commands.build_parser().parse_args(["sample", "--checkpoint", "x.pt"]).command_parser
    (action,) = [a for a in parser._actions if "--compile" in a.option_strings]
    assert said_right(action.help), action.help
    assert "in the runs measured" in action.help, action.help


def test_the_note_before_compiling_gives_the_measured_compile_times(capsys, tmp_path, monkeypatch):
    path = tmp_path / "t.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    capsys.readouterr()
    # the eager loop stands in for the compiled one: this test reads the note, not the compiler
    monkeypatch.setattr(commands.compiled, "generate", lambda model, *a, **k: model.generate(*a, **k))
    code = main(["sample", "--checkpoint", str(path), "--prompt", "KING", "--tokens", "2", "--compile",
                 "--device", "cpu"])
    err = capsys.readouterr().err
    assert code == 0, err
    (note,) = [line for line in err.splitlines() if line.startswith("--compile: compiling")]
    assert said_right(note), note
