import subprocess
import sys

import pytest
import torch

from labnn.training import checkpoint as ckpt
from labnn.cli import MODELS, main

TINY = ["--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--seq-len", "8", "--batch-size", "2",
        "--eval-interval", "2", "--eval-iters", "1", "--device", "cpu"]


def run(*args, cwd):
    return subprocess.run([sys.executable, "-m", "labnn", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def cli(capsys, *args):
    """Run the CLI in this process: (exit status, stdout, stderr)."""
    try:
        code = main(list(args))
    except SystemExit as exit_:
        code = exit_.code
    out = capsys.readouterr()
    return code, out.out, out.err


def one_line_error(code, err, *needles):
    assert code not in (0, None), err
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("train:")]  # progress bar
    assert len(lines) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A transformer checkpoint written by `train` (2 iterations)."""
    path = tmp_path_factory.mktemp("tiny") / "tiny.pt"
    assert main(["train", "--iters", "2", *TINY, "--out", str(path)]) == 0
    return path


def test_train_then_sample(tmp_path):
    ckpt_path = tmp_path / "tiny.pt"
    r = run("train", "--iters", "6", "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--seq-len", "16",
            "--eval-interval", "3", "--eval-iters", "2", "--device", "cpu", "--set", "positions=sinusoidal",
            "--out", str(ckpt_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "val loss" in r.stdout and ckpt_path.exists()
    r = run("sample", "--checkpoint", str(ckpt_path), "--prompt", "ROMEO:", "--tokens", "20", "--device", "cpu",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    # whatever characters this torch version's random stream draws: the prompt, then 20 of the alphabet
    alphabet = set(ckpt.load(ckpt_path)["tokenizer"])
    assert r.stdout.endswith("\n")
    text = r.stdout[:-1]  # print() adds one newline
    assert text.startswith("ROMEO:") and len(text) == 26 and set(text) <= alphabet


@pytest.mark.parametrize("model", sorted(set(MODELS) - {"transformer"}))
def test_every_model_trains_and_samples(tmp_path, model):
    ckpt_path = tmp_path / f"{model}.pt"
    r = run("train", "--model", model, "--iters", "2", *TINY, "--out", str(ckpt_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    r = run("sample", "--checkpoint", str(ckpt_path), "--prompt", "KING", "--tokens", "5", "--device", "cpu",
            cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("KING")


def test_bad_override_is_explained(capsys):
    code, _, err = cli(capsys, "train", "--set", "colour=blue", "--iters", "1")
    one_line_error(code, err, "--set 'colour=blue'", "FIELD one of")


def test_a_user_mistake_is_one_line_and_debug_shows_the_traceback(tmp_path):
    r = run("sample", "--checkpoint", str(tmp_path / "nope.pt"), cwd=tmp_path)
    one_line_error(r.returncode, r.stderr, "nope.pt does not exist")
    r = run("sample", "--checkpoint", str(tmp_path / "nope.pt"), "--debug", cwd=tmp_path)
    assert r.returncode != 0 and "Traceback" in r.stderr and "FileNotFoundError" in r.stderr


def test_missing_corrupt_and_foreign_checkpoints(capsys, tmp_path, tiny):
    one_line_error(*cli(capsys, "sample", "--checkpoint", str(tmp_path / "nope.pt"))[::2], "does not exist")
    bad = tmp_path / "bad.pt"
    data = bytearray(tiny.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    one_line_error(*cli(capsys, "sample", "--checkpoint", str(bad))[::2], "bad.pt is corrupted")
    one_line_error(*cli(capsys, "sample", "--checkpoint", str(tmp_path))[::2], "is a directory")
    foreign = tmp_path / "foreign.pt"
    ckpt.save_atomic({"model": {}}, foreign)
    one_line_error(*cli(capsys, "sample", "--checkpoint", str(foreign))[::2], "not written by `python -m labnn train`")
    unknown = tmp_path / "unknown.pt"
    ckpt.save_atomic({**ckpt.load(tiny), "cli_model": "lstm"}, unknown)
    one_line_error(*cli(capsys, "sample", "--checkpoint", str(unknown))[::2], "'lstm'", "transformer")


def test_resuming_a_checkpoint_of_another_model(capsys, tmp_path, tiny):
    out = tmp_path / "m.pt"
    out.write_bytes(tiny.read_bytes())
    code, _, err = cli(capsys, "train", "--model", "xl", "--iters", "2", *TINY, "--out", str(out), "--resume")
    one_line_error(code, err, "--resume", "--model transformer (not xl)", "--overwrite")
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--d-model", "32", "--out", str(out), "--resume")
    one_line_error(code, err, "--d-model 16 (not 32)", "--overwrite")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_cuda(capsys, tmp_path, tiny):
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--device", "cuda")
    one_line_error(code, err, "'cuda' was asked for, but CUDA is not available")
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--device", "cuda", "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, "'cuda' was asked for, but CUDA is not available")
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--device", "gpu")
    one_line_error(code, err, "'gpu' is not a device name")


def test_offline_without_a_corpus(capsys, tmp_path, monkeypatch):
    import urllib.error
    import urllib.request

    def offline(*a, **k):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setenv("LABNN_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, "could not download Tiny Shakespeare", "LABNN_DATA_DIR")


def test_prompt_mistakes(capsys, tiny):
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--prompt", "naïve")
    one_line_error(code, err, "--prompt", "'ï' at position 2")
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--prompt", "")
    one_line_error(code, err, "--prompt", "at least one character")
    code, out, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--prompt", "AB", "--tokens", "0")
    assert code == 0 and out == "AB\n", err


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "--iters", "-5"], "argument --iters: expected an int >= 1, got '-5'"),
        (["train", "--iters", "0"], "argument --iters: expected an int >= 1, got '0'"),
        (["train", "--batch-size", "0"], "argument --batch-size: expected an int >= 1"),
        (["train", "--eval-iters", "0"], "argument --eval-iters: expected an int >= 1"),
        (["train", "--eval-interval", "-1"], "argument --eval-interval: expected an int >= 1"),
        (["train", "--seq-len", "0"], "argument --seq-len: expected an int >= 1"),
        (["train", "--d-model", "-16"], "argument --d-model: expected an int >= 1"),
        (["train", "--seed", "-1"], "argument --seed: expected an int >= 0"),
        (["train", "--iters", "2.5"], "argument --iters: expected an int >= 1, got '2.5'"),
        (["train", "--lr", "nan"], "argument --lr: expected a finite number > 0, got 'nan'"),
        (["train", "--lr=-1e-3"], "argument --lr: expected a finite number > 0"),
        (["train", "--lr", "inf"], "argument --lr: expected a finite number > 0"),
        (["train", "--dropout", "1.5"], "argument --dropout: expected a number in [0, 1)"),
        (["train", "--dropout", "nan"], "argument --dropout: expected a number in [0, 1)"),
        (["train", "--seed", str(2**64)], "--seed: expected an int >= 0 and < 2**64 (torch's seeds"),
        (["sample", "--checkpoint", "x.pt", "--seed", str(10**23)], "--seed: expected an int >= 0 and"),
        (["sample", "--checkpoint", "x.pt", "--tokens", "-1"], "argument --tokens: expected an int >= 0"),
        (["sample", "--checkpoint", "x.pt", "--tokens", "9" * 20],  # past int64 (trial 55e)
         "argument --tokens: expected an int >= 0 and < 2**31"),
        (["sample", "--checkpoint", "x.pt", "--top-k", "0"], "argument --top-k: expected an int >= 1"),
        (["sample", "--checkpoint", "x.pt", "--temperature", "-1"], "argument --temperature: expected a finite"),
        (["sample", "--checkpoint", "x.pt", "--temperature", "nan"], "argument --temperature: expected a finite"),
    ],
)
def test_bad_numbers_are_one_line(capsys, args, needle):
    code, _, err = cli(capsys, *args)
    one_line_error(code, err, needle)


def test_out_mistakes(capsys, tmp_path, tiny):
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(tmp_path))
    one_line_error(code, err, "--out", "is a directory")
    out = tmp_path / "m.pt"
    out.write_bytes(tiny.read_bytes())
    before = out.read_bytes()
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out))
    one_line_error(code, err, "exists", "--resume", "--overwrite")
    assert out.read_bytes() == before
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out), "--resume", "--overwrite")
    one_line_error(code, err, "--resume", "--overwrite")
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out), "--overwrite")
    assert code == 0, err
    assert ckpt.load(out)["iter"] == 1
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", "/proc/labnn/m.pt")
    one_line_error(code, err, "/proc/labnn")


@pytest.mark.parametrize(
    "pair, needle",
    [
        ("dropout=0.1", "--set dropout=0.1: dropout has its own option, --dropout"),
        ("d_model=32", "--set d_model=32: d_model has its own option, --d-model"),
        ("seq_len=32", "--set seq_len=32: seq_len has its own option, --seq-len"),
        ("vocab_size=5", "--set vocab_size=5: vocab_size is the corpus's alphabet size"),
        ("d_ff=two", "--set d_ff=two: expected an int or null, got str 'two'"),
        ("d_ff=1.5", "--set d_ff=1.5: expected an int or null, got float 1.5"),
        ("d_ff=true", "--set d_ff=true: expected an int or null, got bool True"),
        ("bias=1", "--set bias=1: expected true or false, got int 1"),
        ("attn_len=NaN", "--set attn_len=NaN: expected an int or null, got float nan"),
        ("positions=5", "positions must be one of"),
        ("colour", "--set 'colour': expected FIELD=VALUE"),
    ],
)
def test_set_mistakes(capsys, tmp_path, pair, needle):
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--set", pair, "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, needle)


def test_set_accepts_null_and_ints_for_floats(capsys, tmp_path):
    code, out, err = cli(capsys, "train", "--model", "xl", "--iters", "1", *TINY, "--set", "clamp_len=null",
                         "--set", "mem_len=4", "--out", str(tmp_path / "a.pt"))
    assert code == 0, err
    assert "mem_len=4" in out and "clamp_len=None" in out


def test_batches_larger_than_the_data(capsys, tmp_path):
    code, _, err = cli(capsys, "train", "--model", "xl", "--iters", "1", *TINY[:6], "--batch-size", "20000",
                       "--device", "cpu", "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, "--batch-size 20000 --seq-len 64: the training split holds 1,003,854 "
                   "characters, too few for 20000 streams of 64 + 1; lower --batch-size or --seq-len")


def test_a_diverging_run_is_one_line_and_saves_no_garbage(capsys, tmp_path):
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--iters", "6", *TINY, "--lr", "1e30", "--out", str(out))
    line = one_line_error(code, err, "training diverged", "lower --lr (now 1e+30)")
    assert "grad_clip" not in line, line  # not an option of the command line (trial 55e)
    if out.exists():
        assert all(torch.isfinite(v).all() for v in ckpt.load(out)["model"].values()), line


def test_train_options_name_train_config_fields_and_real_options():
    """The names a message offers (`TRAIN_OPTIONS`) are options of `train`, each named by the
    field it sets."""
    from dataclasses import fields

    from labnn.cli.commands import build_parser
    from labnn.cli.options import TRAIN_OPTIONS
    from labnn.training.config import TrainConfig

    options = set(build_parser().parse_args(["train"]).command_parser.options())
    assert set(TRAIN_OPTIONS) <= {f.name for f in fields(TrainConfig)}
    assert set(TRAIN_OPTIONS.values()) <= options, set(TRAIN_OPTIONS.values()) - options
    assert "grad_clip" not in TRAIN_OPTIONS and "--grad-clip" not in options


def test_every_checkpoint_train_writes_can_be_sampled(capsys, tmp_path, monkeypatch):
    from labnn.training.trainer import Trainer

    step = Trainer.train_step

    def killed_at_3(self):
        if self.iter == 3:
            raise KeyboardInterrupt  # the periodic checkpoint of iteration 2 is on disk
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", killed_at_3)
    out = tmp_path / "a.pt"
    code, _, err = cli(capsys, "train", "--iters", "6", *TINY, "--out", str(out))
    assert code == 130 and "interrupted at iteration 3" in err and "--resume" in err, err
    assert ckpt.load(out)["iter"] == 2
    code, stdout, err = cli(capsys, "sample", "--checkpoint", str(out), "--prompt", "KING", "--tokens", "3")
    assert code == 0 and stdout.startswith("KING"), err


@pytest.mark.parametrize("model", ["transformer", "xl", "feedback-kv"])
def test_sample_compile_prints_what_eager_sampling_prints(capsys, tmp_path, model):
    path = tmp_path / f"{model}.pt"
    assert main(["train", "--model", model, "--iters", "2", *TINY, "--out", str(path)]) == 0
    capsys.readouterr()
    tokens = "4" if model == "transformer" else "12"  # learned positions: seq_len 8 at most
    sample = ["sample", "--checkpoint", str(path), "--prompt", "KING", "--tokens", tokens,
              "--temperature", "0", "--device", "cpu"]
    code, eager, err = cli(capsys, *sample)
    assert code == 0 and "compiling" not in err, err
    code, compiled, err = cli(capsys, *sample, "--compile")
    assert code == 0, err
    assert compiled == eager and compiled.startswith("KING")
    # the pause before the first character is said, on stderr (the text stays stdout's)
    assert "--compile: compiling the decoding step first" in err, err


def test_sample_compile_names_the_models_it_serves(capsys, tmp_path, tiny):
    path = tmp_path / "feedback.pt"
    assert main(["train", "--model", "feedback", "--iters", "2", *TINY, "--out", str(path)]) == 0
    capsys.readouterr()
    code, _, err = cli(capsys, "sample", "--checkpoint", str(path), "--compile", "--device", "cpu")
    one_line_error(code, err, "--compile generates with the transformer, xl and feedback-kv "
                   "models", "holds a feedback model")
    # learned positions stop at seq_len: the ring cannot slide them, eager generation can
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--compile", "--device", "cpu",
                       "--tokens", "500")
    one_line_error(code, err, "--compile: this transformer learned 8 positions",
                   "--tokens 8 or fewer after this --prompt of 1 character ", "leave out --compile")


# Safe to share, safe to resume (issue 29)


def plant(path, payload, marker):
    """`payload` plus an entry whose unpickling runs `touch marker`, behind a valid header."""
    from test_checkpoint import RunsCode, write_pickled

    return write_pickled(path, {**payload, "x": RunsCode(marker)})


def test_a_planted_checkpoint_runs_no_code_in_sample_or_resume(capsys, tmp_path, tiny):
    marker = tmp_path / "pwned"
    evil = plant(tmp_path / "evil.pt", ckpt.load(tiny), marker)
    code, _, err = cli(capsys, "sample", "--checkpoint", str(evil), "--prompt", "A", "--tokens", "2")
    # no labnn checkpoint names posix.system: the line does not offer --trust-checkpoint,
    # which would run it (trial 55e)
    line = one_line_error(code, err, "evil.pt", "posix.system", "not loaded",
                          "no labnn checkpoint names it: do not load this file")
    assert "--trust-checkpoint" not in line, line
    code, _, err = cli(capsys, "train", "--iters", "4", *TINY, "--out", str(evil), "--resume")
    line = one_line_error(code, err, "evil.pt", "posix.system", "not loaded", "do not load")
    assert "--trust-checkpoint" not in line, line
    assert not marker.exists()


def test_an_old_checkpoint_loads_with_trust_checkpoint(capsys, tmp_path):
    from test_checkpoint import write_pickled

    new = tmp_path / "new.pt"
    assert main(["train", "--model", "feedback", "--iters", "2", *TINY, "--out", str(new)]) == 0
    saved = ckpt.load(new)
    assert type(saved["state"]).__name__ == "FeedbackState"
    old = write_pickled(tmp_path / "old.pt", saved)  # what labnn wrote before: a pickled FeedbackState
    capsys.readouterr()
    sample = ["sample", "--checkpoint", str(old), "--prompt", "KING", "--tokens", "3", "--device", "cpu"]
    one_line_error(*cli(capsys, *sample)[::2], "old.pt", "FeedbackState",
                   "--trust-checkpoint")
    code, out, err = cli(capsys, *sample, "--trust-checkpoint")
    assert code == 0 and out.startswith("KING"), err
    resume = ["train", "--model", "feedback", "--iters", "4", *TINY, "--out", str(old), "--resume"]
    one_line_error(*cli(capsys, *resume)[::2], "old.pt", "FeedbackState",
                   "--trust-checkpoint")
    code, _, err = cli(capsys, *resume, "--trust-checkpoint")
    assert code == 0, err
    assert ckpt.load(old)["iter"] == 4  # saved again in the safe format
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(tmp_path / "c.pt"),
                       "--trust-checkpoint")
    one_line_error(code, err, "--trust-checkpoint", "--resume")


def unwritable_folder(tmp_path):
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        (folder / "probe").touch()
    except PermissionError:
        return folder
    pytest.skip("this user (root) writes into a 0o555 folder")


@pytest.mark.parametrize("where", ["read-only folder", "/proc"])
def test_an_unwritable_out_is_refused_before_training(capsys, tmp_path, monkeypatch, where):
    from labnn.training.trainer import Trainer

    def fit(self, *a, **k):
        raise RuntimeError("training started")

    monkeypatch.setattr(Trainer, "fit", fit)
    out = unwritable_folder(tmp_path) / "m.pt" if where != "/proc" else "/proc/self/m.pt"
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out))
    one_line_error(code, err, f"--out {out}", "cannot write")  # not "training started"


def test_resuming_with_another_iters_is_refused_past_warm_up(capsys, tmp_path):
    out = tmp_path / "m.pt"
    sizes = [*TINY, "--eval-interval", "51", "--out", str(out)]
    assert main(["train", "--iters", "102", *sizes]) == 0  # past the 100 steps of warm-up
    before = out.read_bytes()
    code, _, err = cli(capsys, "train", "--iters", "200", *sizes, "--resume")
    one_line_error(code, err, "--iters 200", "iteration 102 of a run of --iters 102",
                   "learning rate", "--iters 102")
    assert out.read_bytes() == before


def test_sample_names_what_is_wrong_with_a_checkpoint(capsys, tmp_path, tiny):
    def sample(path):
        return cli(capsys, "sample", "--checkpoint", str(path), "--device", "cpu")[::2]

    one_line_error(*sample("/dev/null"), "/dev/null is not a regular file (a character device)")
    (tmp_path / "empty.pt").write_bytes(b"")
    one_line_error(*sample(tmp_path / "empty.pt"), "empty.pt is empty (0 bytes)")
    from test_checkpoint import write_pickled

    write_pickled(tmp_path / "tensor.pt", torch.zeros(3))
    one_line_error(*sample(tmp_path / "tensor.pt"), "tensor.pt holds a Tensor, not a dict")
    saved = ckpt.load(tiny)
    for other in ("xl", "feedback", "feedback-kv"):
        ckpt.save_atomic({**saved, "cli_model": other}, tmp_path / "relabelled.pt")
        one_line_error(*sample(tmp_path / "relabelled.pt"), f"cli_model {other!r}",
                       "holds the weights of a TransformerLM")
    config = {**saved["model_config"], "d_model": 32}  # a config its weights do not fit
    ckpt.save_atomic({**saved, "model_config": config}, tmp_path / "resized.pt")
    one_line_error(*sample(tmp_path / "resized.pt"), "resized.pt", "do not fit",
                   "tok_emb.weight: checkpoint [65, 16] vs model [65, 32]")
    config = {**saved["model_config"], "colour": "blue"}
    ckpt.save_atomic({**saved, "model_config": config}, tmp_path / "odd.pt")
    one_line_error(*sample(tmp_path / "odd.pt"), "odd.pt", "model_config", "colour")


@pytest.mark.parametrize("device, needle", [("meta", "holds shapes but no values"),
                                            ("xla", "this torch cannot place tensors on it")])
def test_a_device_that_cannot_compute_is_one_line(capsys, tmp_path, tiny, device, needle):
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--device", device,
                       "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, f"--device {device}", needle)
    assert not (tmp_path / "a.pt").exists()
    code, _, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--device", device)
    one_line_error(code, err, f"--device {device}", needle)


@pytest.mark.parametrize("command", ["train", "sample"])
def test_ctrl_c_before_training_or_sampling_starts_is_one_line(capsys, tmp_path, monkeypatch,
                                                                tiny, command):
    import labnn.cli.commands

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(labnn.cli.commands, "read_corpus", interrupted)  # train: reading the data
    monkeypatch.setattr(labnn.cli.commands.ckpt, "load", interrupted)  # sample: the checkpoint
    args = (["train", "--iters", "1", *TINY, "--out", str(tmp_path / "a.pt")]
            if command == "train" else ["sample", "--checkpoint", str(tiny)])
    try:
        code, _, err = cli(capsys, *args)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped main(): a traceback")  # rather than stopping pytest
    assert code == 130, err
    one_line_error(code, err, f"python -m labnn {command}: interrupted")
    assert not (tmp_path / "a.pt").exists()


# `python -m labnn` with a Ctrl-C arriving while torch is imported (its first second or two):
# the import of torch raises KeyboardInterrupt, as the signal would.
CTRL_C_IN_IMPORT = """
import runpy, sys
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
sys.argv = ["labnn", "train", "--iters", "1"]
runpy.run_module("labnn", run_name="__main__", alter_sys=True)
"""


def test_ctrl_c_while_torch_loads_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, "-c", CTRL_C_IN_IMPORT], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    assert done.returncode == 130, done.stderr
    one_line_error(done.returncode, done.stderr, "python -m labnn: interrupted while starting")


def test_a_real_ctrl_c_while_the_cli_starts_is_one_line(tmp_path):
    """SIGINT half a second in, while torch loads: held back, then one line (trial 55e:
    one in ~35 such interrupts aborted inside triton's import, 138 lines)."""
    import signal
    import time
    child = subprocess.Popen([sys.executable, "-m", "labnn", "sample", "--checkpoint", "x.pt"],
                             cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    time.sleep(0.5)
    child.send_signal(signal.SIGINT)
    err = child.communicate(timeout=120)[1]
    if "does not exist" in err:
        pytest.skip("the CLI started within half a second: nothing to interrupt")
    one_line_error(child.returncode, err, "python -m labnn: interrupted while starting")
    assert child.returncode == 130, err


def test_importing_labnn_loads_torch_only_with_a_sub_package():
    probe = ("import sys, labnn; print('torch' in sys.modules); "
             "labnn.nn.causal_mask; print('torch' in sys.modules, sorted(set(dir(labnn)) & "
             "{'nn', 'xl', 'seed_everything'}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120).stdout.split("\n")
    assert out[:2] == ["False", "True ['nn', 'seed_everything', 'xl']"], out


def test_the_command_line_and_every_model_load_without_the_compiler():
    """torch._dynamo (as long to import as torch itself: about 3 s on a 2-core CPU) loads when
    something compiles, not with the CLI or a model (`Stack`'s eager-under-compile marks)."""
    probe = ("import sys, labnn.cli.commands, labnn.feedback, labnn.xl, labnn.transformer, "
             "labnn.compiled; print(sorted(m for m in ('torch._dynamo', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("flags, lower", [
    (["--seq-len", "100000"], "lower --batch-size or --seq-len"),
    (["--batch-size", "100000"], "lower --batch-size or --seq-len"),
    (["--d-model", "40000"], "lower --d-model or --n-layers"),  # 77 billion parameters
])
def test_a_run_too_large_for_memory_is_one_line_before_allocating(capsys, tmp_path, monkeypatch,
                                                                  flags, lower):
    import time

    import labnn.training.config

    # what any machine might have
    monkeypatch.setattr(labnn.training.config, "available_memory", lambda device: 16 * 2**30)
    start = time.perf_counter()
    code, _, err = cli(capsys, "train", "--iters", "1", "--device", "cpu", *flags,
                       "--out", str(tmp_path / "a.pt"))
    one_line_error(code, err, f"{flags[0]} {flags[1]}", "needs at least",
                   "16.0 GiB available on cpu", lower)
    assert time.perf_counter() - start < 30 and not (tmp_path / "a.pt").exists()


def test_resume_without_a_checkpoint_says_it_starts_afresh(capsys, tmp_path):
    out = tmp_path / "typo.pt"
    code, stdout, err = cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out), "--resume")
    assert code == 0, err
    assert f"--resume: {out} does not exist yet; starting a new run" in stdout
    code, stdout, err = cli(capsys, "train", "--iters", "4", *TINY, "--out", str(out), "--resume")
    assert code == 0 and "starting a new run" not in stdout and ckpt.load(out)["iter"] == 4, err


def test_two_runs_cannot_write_the_same_out_at_once(capsys, tmp_path):
    out = tmp_path / "m.pt"
    hold = ("import sys, time\nfrom labnn.training import checkpoint as ckpt\n"
            "with ckpt.exclusive(sys.argv[1]):\n"
            "    print('held', flush=True)\n    time.sleep(120)\n")
    other = subprocess.Popen([sys.executable, "-c", hold, str(out)], stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline() == "held\n"  # another run is training into --out
        for flag in ("--overwrite", "--resume"):
            code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out), flag)
            one_line_error(code, err, str(out), "being written by another run", f"pid {other.pid}")
        assert not out.exists()
    finally:
        other.kill()  # as kill -9: its lock goes with it
        other.wait()
    code, _, err = cli(capsys, "train", "--iters", "2", *TINY, "--out", str(out))
    assert code == 0, err
    assert [p.name for p in tmp_path.iterdir()] == ["m.pt"]  # nothing left beside it


def test_an_out_name_too_long_names_the_flag(capsys, tmp_path):
    out = tmp_path / ("a" * 300 + ".pt")
    code, _, err = cli(capsys, "train", "--iters", "1", *TINY, "--out", str(out))
    one_line_error(code, err, "--out", "File name too long")


def test_train_defaults_are_train_configs():
    """The CLI retyped `TrainConfig`'s defaults (2000 steps, batch 12, ...): one set now."""
    from labnn.cli import build_parser
    from labnn.training.config import TrainConfig

    args, run = build_parser().parse_args(["train"]), TrainConfig()
    assert (args.iters, args.batch_size, args.seq_len, args.lr, args.eval_interval,
            args.eval_iters, args.seed) == (run.max_iters, run.batch_size, run.seq_len,
                                            run.lr, run.eval_interval, run.eval_iters, run.seed)


class Terminal:
    """A stdout that keeps each write apart, as a terminal shows it."""

    def __init__(self):
        self.writes = []

    def write(self, text):
        self.writes.append(text)
        return len(text)

    def flush(self):
        self.writes.append("<flush>")


def test_sample_prints_each_character_as_it_is_drawn(monkeypatch, tiny):
    """A long sample shows its text as it comes: when the k-th character is drawn, the
    prompt and the k - 1 before it are already written and flushed."""
    from labnn.nn import generation

    screen, real = Terminal(), generation.sample_next
    shown = []  # what the terminal showed when each character was drawn

    def counted(*args, **kwargs):
        text = "".join(screen.writes)
        shown.append(text[: text.rfind("<flush>")].replace("<flush>", ""))
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "sample_next", counted)
    monkeypatch.setattr(sys, "stdout", screen)
    assert main(["sample", "--checkpoint", str(tiny), "--prompt", "KING", "--tokens", "5",
                 "--device", "cpu"]) == 0
    text = "".join(w for w in screen.writes if w != "<flush>")
    assert text.startswith("KING") and len(text) == 10 and text.endswith("\n")
    assert shown == [text[:4 + k] for k in range(5)]


def test_ctrl_c_while_sampling_keeps_the_text_so_far(capsys, monkeypatch, tiny):
    from labnn.nn import generation

    real, calls = generation.sample_next, []

    def interrupted_at_the_fourth(*args, **kwargs):
        calls.append(1)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(generation, "sample_next", interrupted_at_the_fourth)
    code, out, err = cli(capsys, "sample", "--checkpoint", str(tiny), "--prompt", "KING",
                         "--tokens", "10", "--device", "cpu")
    assert code == 130 and out.startswith("KING") and len(out) == 4 + 3 + 1, (out, err)
    one_line_error(code, err, "python -m labnn sample: interrupted after 3 of 10 characters")


def test_a_resumed_run_says_where_it_continues_and_a_finished_one_that_nothing_was_left(capsys,
                                                                                       tmp_path):
    """`--resume` of a run that reached its --iters printed what a new run prints; now it says
    that nothing was left to train and how to go on, and a resumed run where it took up."""
    out = tmp_path / "m.pt"
    train = ["train", *TINY, "--out", str(out), "--resume"]
    assert cli(capsys, *train, "--iters", "2")[0] == 0
    code, text, _ = cli(capsys, *train, "--iters", "2")
    assert code == 0
    assert f"--resume: {out} had finished its 2 iterations; nothing left to train " \
           "(a larger --iters trains on)" in text, text
    code, text, _ = cli(capsys, *train, "--iters", "4")
    assert code == 0 and f"--resume: trained {out} on from iteration 2 to 4" in text, text
