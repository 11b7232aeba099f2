import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from labnn.training import checkpoint as ckpt


def payload():
    g = torch.Generator().manual_seed(0)
    return {"model": {"w": torch.randn(8, 8, generator=g)}, "iter": 7, "note": "x"}


def test_round_trip_keeps_the_payload(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    back = ckpt.load(path)
    assert back["iter"] == 7 and back["note"] == "x"
    torch.testing.assert_close(back["model"]["w"], payload()["model"]["w"], rtol=0, atol=0)


def test_every_single_byte_corruption_is_refused(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    good = path.read_bytes()
    bad = tmp_path / "bad.pt"
    loaded_differently = []
    for i in range(0, len(good), max(1, len(good) // 300)):  # ~300 positions over the whole file
        data = bytearray(good)
        data[i] ^= 0xFF
        bad.write_bytes(bytes(data))
        try:
            back = ckpt.load(bad)
        except ValueError as err:
            assert "bad.pt" in str(err)
            continue
        if not torch.equal(back["model"]["w"], payload()["model"]["w"]) or back["iter"] != 7:
            loaded_differently.append(i)
    assert loaded_differently == []


def test_corrupted_payload_names_the_checksum(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="a.pt is corrupted: its sha256 is"):
        ckpt.load(path)


def test_truncated_and_foreign_files_are_clear_errors(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(ValueError, match="a.pt"):
        ckpt.load(path)
    plain = tmp_path / "plain.pt"
    torch.save(payload(), plain)  # a torch file without labnn's checksum
    with pytest.raises(ValueError, match="plain.pt has no checksum.*verify=False"):
        ckpt.load(plain)
    assert ckpt.load(plain, verify=False)["iter"] == 7
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(ValueError, match="text.pt"):
        ckpt.load(tmp_path / "text.pt")


def test_missing_file_and_directory_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt does not exist"):
        ckpt.load(tmp_path / "nope.pt")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ckpt.load(tmp_path)
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ckpt.save_atomic(payload(), tmp_path)


def test_file_mode_follows_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_an_existing_files_mode_is_kept(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    path.chmod(0o640)
    ckpt.save_atomic(payload(), path)
    assert path.stat().st_mode & 0o777 == 0o640


def test_saving_through_a_symlink_writes_the_target_and_keeps_the_link(tmp_path):
    (tmp_path / "runs").mkdir()
    target = tmp_path / "runs" / "real.pt"
    ckpt.save_atomic({"iter": 1}, target)
    link = tmp_path / "latest.pt"
    link.symlink_to(target)
    ckpt.save_atomic({"iter": 2}, link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert ckpt.load(target)["iter"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.pt", "runs"]
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["real.pt"]


def test_a_save_killed_mid_way_leaves_no_temporary_for_ever(tmp_path):
    # a child process starts a save and is killed -9 while writing
    script = (
        "import os, signal, torch, sys\n"
        "from labnn.training import checkpoint as ckpt\n"
        "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)\n"
        "ckpt.save_atomic({'iter': 1}, sys.argv[1])\n"
    )
    target = tmp_path / "a.pt"
    r = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, timeout=120)
    assert r.returncode == -9
    leftovers = [p.name for p in tmp_path.iterdir()]
    assert leftovers and not target.exists()  # the dead process left its temporary (nothing can prevent that)
    ckpt.save_atomic({"iter": 2}, target)  # the next save cleans it up
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]
    assert ckpt.load(target)["iter"] == 2


def test_a_live_writers_temporary_is_left_alone(tmp_path):
    target = tmp_path / "a.pt"
    live = tmp_path / f".a.pt.{os.getppid()}.0123abcd.tmp"  # our parent is alive: its save may be in progress
    live.write_bytes(b"in progress")
    ckpt.save_atomic({"iter": 1}, target)
    assert live.exists()


def test_a_failed_save_keeps_the_previous_file_and_leaves_nothing(tmp_path, monkeypatch):
    target = ckpt.save_atomic({"iter": 1}, tmp_path / "a.pt")
    before = target.read_bytes()

    def crash(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        ckpt.save_atomic({"iter": 2}, target)
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.pt"]


# Safe to share: loading a checkpoint never runs code (issue 29)


class RunsCode:
    """Unpickling it runs `touch marker`: what a malicious checkpoint would hide."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


def write_pickled(path, payload):
    """A checkpoint as labnn wrote them before issue 29 (and as an attacker can): any pickle, behind a
    valid header and checksum."""
    import hashlib
    import io

    buffer = io.BytesIO()
    torch.save(payload, buffer)
    data = buffer.getvalue()
    path.write_bytes(ckpt.MAGIC + hashlib.sha256(data).hexdigest().encode() + b"\n" + data)
    return path


def feedback_state():
    from labnn.feedback.model import FeedbackState

    g = torch.Generator().manual_seed(0)
    return FeedbackState(torch.randn(2, 3, 4, generator=g), (torch.randn(2, 1, 3, 4, generator=g),),
                         (torch.randn(2, 1, 3, 4, generator=g),), offset=5)


@dataclasses.dataclass
class Mine:
    a: int


def test_a_planted_checkpoint_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    evil = write_pickled(tmp_path / "evil.pt", {**payload(), "x": RunsCode(marker)})
    refused = r"evil.pt .*posix.system.*not loaded.*No labnn checkpoint names it"
    with pytest.raises(ckpt.UntrustedCheckpointError, match=refused) as err:
        ckpt.load(evil)
    # trusted=True is offered for an older labnn's own classes only, never for this
    assert "trusted=True" not in str(err.value), err.value
    assert "posix.system" in err.value.names and not err.value.labnn_only
    plain = tmp_path / "plain.pt"
    torch.save({"x": RunsCode(marker)}, plain)  # no header: read unverified
    with pytest.raises(ckpt.UntrustedCheckpointError, match="plain.pt"):
        ckpt.load(plain, verify=False)
    assert not marker.exists()
    ckpt.load(evil, trusted=True)  # the plant is real: the old loader ran it
    assert marker.exists()


def test_an_old_format_checkpoint_loads_only_when_trusted(tmp_path):
    old = write_pickled(tmp_path / "old.pt", {"iter": 3, "state": feedback_state()})
    refused = r"old.pt .*(labnn.feedback.model.FeedbackState.*)?trusted=True"
    with pytest.raises(ckpt.UntrustedCheckpointError, match=refused) as refusal:
        ckpt.load(old)
    assert refusal.value.labnn_only, refusal.value.names
    err = pytest.raises(ValueError, ckpt.load, old).value  # still a ValueError for existing callers
    assert "\n" not in str(err)
    back = ckpt.load(old, trusted=True)
    assert back["iter"] == 3 and back["state"].offset == 5


def test_saved_checkpoints_hold_plain_data_and_dataclasses_come_back(tmp_path):
    from collections import OrderedDict

    from labnn.feedback.model import FeedbackState

    model = torch.nn.BatchNorm1d(3)  # its state_dict carries `_metadata` (versions)
    state = feedback_state()
    path = ckpt.save_atomic({"model": model.state_dict(), "state": state, "betas": (0.9, 0.99),
                             "history": {"loss": [1.5, 2.0]}, "none": None}, tmp_path / "a.pt")
    import io

    raw = torch.load(io.BytesIO(path.read_bytes()[ckpt.HEADER_LEN:]), weights_only=True)
    assert raw["state"]["__dataclass__"] == "labnn.feedback.model.FeedbackState"
    back = ckpt.load(path)
    assert isinstance(back["state"], FeedbackState) and back["state"].offset == 5
    torch.testing.assert_close(back["state"].keys[0], state.keys[0], rtol=0, atol=0)
    assert isinstance(back["state"].keys, tuple) and back["betas"] == (0.9, 0.99)
    assert isinstance(back["model"], OrderedDict)
    assert back["model"]._metadata == model.state_dict()._metadata
    assert back["history"] == {"loss": [1.5, 2.0]} and back["none"] is None


@pytest.mark.parametrize(
    "value, where",
    [
        ({"loss": [1.0, __import__("numpy").float64(2.0)]}, "['x']['loss'][1] is a numpy.float64"),
        ({1, 2}, "['x'] is a set"),
        (lambda: 0, "['x'] is a function"),
        (torch.float32, "['x'] is a torch.dtype"),
        (Mine(1), f"['x'] is a {Mine.__module__}.Mine, a dataclass from outside labnn"),
        ({"state": [feedback_state(), {3}]}, "['x']['state'][1] is a set"),
    ],
)
def test_save_refuses_what_the_safe_loader_would_refuse(tmp_path, value, where):
    with pytest.raises(TypeError, match=re_escape(f"cannot save {tmp_path / 'a.pt'}: payload{where}")):
        ckpt.save_atomic({"x": value}, tmp_path / "a.pt")
    assert list(tmp_path.iterdir()) == []


def re_escape(text):
    import re

    return re.escape(text)


@pytest.mark.parametrize("name", ["os.system", "labnn.__main__.main", "labnn.cli.main", "labnn.nope.X",
                                  "subprocess.Popen"])
def test_a_forged_dataclass_name_imports_and_runs_nothing(tmp_path, name):
    import sys

    path = tmp_path / "a.pt"
    # what save_atomic writes for a dataclass, naming something else
    write_pickled(path, {"state": {"__dataclass__": name, "args": "touch pwned"}})
    was_imported = set(sys.modules)
    refused = re_escape(f"a.pt: ['state'] names {name!r}, which is not a dataclass")
    with pytest.raises(ValueError, match=refused):
        ckpt.load(path)
    assert not (set(sys.modules) - was_imported) & {"labnn.__main__", "subprocess", "labnn.nope"}


def test_an_unwritable_checkpoint_folder_is_found_before_any_work(tmp_path):
    ckpt.check_writable(tmp_path / "new" / "a.pt")  # creates the folder, leaves nothing else
    assert [p.name for p in tmp_path.iterdir()] == ["new"] and list((tmp_path / "new").iterdir()) == []
    with pytest.raises(OSError, match="cannot write a checkpoint in /proc/"):
        ckpt.check_writable("/proc/self/a.pt")  # refused even to root
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError, match="file"):
        ckpt.check_writable(tmp_path / "file" / "a.pt")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        ckpt.check_writable(tmp_path)


def test_a_trainer_refuses_an_unwritable_checkpoint_before_training():
    from labnn.training.trainer import TrainConfig, Trainer

    ids = torch.arange(200) % 13
    config = TrainConfig(max_iters=2, batch_size=2, seq_len=8, device="cpu", checkpoint="/proc/self/a.pt",
                         show_progress=False)
    trainer = Trainer(tiny_model("transformer"), ids, ids, config)
    with pytest.raises(OSError, match="/proc/self/a.pt: cannot write a checkpoint"):
        trainer.fit()
    assert trainer.iter == 0 and trainer.history["iter"] == []


def tiny_model(kind):
    from labnn.feedback.model import FeedbackConfig, FeedbackTransformer
    from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
    from labnn.transformer import TransformerConfig, TransformerLM
    from labnn.xl.model import TransformerXL, XLConfig

    torch.manual_seed(0)
    sizes = dict(vocab_size=13, d_model=16, n_heads=2, n_layers=1)
    return {
        "transformer": lambda: TransformerLM(TransformerConfig(seq_len=8, **sizes)),
        "xl": lambda: TransformerXL(XLConfig(mem_len=8, **sizes)),
        "feedback": lambda: FeedbackTransformer(FeedbackConfig(**sizes)),
        "feedback-kv": lambda: FeedbackTransformerKV(FeedbackKVConfig(**sizes)),
    }[kind]()


@pytest.mark.parametrize("kind", ["transformer", "xl", "feedback", "feedback-kv"])
def test_every_models_training_state_round_trips_through_the_safe_loader(tmp_path, kind):
    import io

    from labnn.training.trainer import TrainConfig, Trainer

    ids = torch.randint(0, 13, (40,), generator=torch.Generator().manual_seed(0)).repeat(20)
    tr, va = ids[:600], ids[600:]
    config = dict(max_iters=6, batch_size=2, seq_len=8, warmup_iters=2, eval_interval=3, eval_iters=1,
                  stream=kind != "transformer", device="cpu", show_progress=False)
    straight = Trainer(tiny_model(kind), tr, va, TrainConfig(**config)).fit()
    path = tmp_path / "a.pt"
    Trainer(tiny_model(kind), tr, va, TrainConfig(**{**config, "max_iters": 3}, checkpoint=str(path))).fit()
    torch.load(io.BytesIO(path.read_bytes()[ckpt.HEADER_LEN:]), weights_only=True)  # plain data only
    resumed = Trainer(tiny_model(kind), tr, va, TrainConfig(**config, checkpoint=str(path)))
    assert resumed.fit(resume=True) == {**straight, "time": resumed.history["time"]}
    assert (resumed.state is None) == (kind == "transformer")


# What is not a checkpoint is named as what it is (issue 29)


def test_what_is_not_a_checkpoint_is_named(tmp_path):
    with pytest.raises(ValueError, match="/dev/null is not a regular file .a character device."):
        ckpt.load("/dev/null")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ValueError, match="fifo is not a regular file .a pipe."):
        ckpt.load(tmp_path / "fifo")  # refused without opening it (which would block)
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="empty.pt is empty .0 bytes.: not a labnn checkpoint"):
        ckpt.load(tmp_path / "empty.pt")
    (tmp_path / "notes.txt").write_text("hello world\n")
    with pytest.raises(ValueError, match=r"notes.txt is not a labnn checkpoint: it starts with b'he"):
        ckpt.load(tmp_path / "notes.txt")
    (tmp_path / "gone.pt").symlink_to(tmp_path / "elsewhere.pt")
    with pytest.raises(FileNotFoundError, match="gone.pt is a symlink to .*elsewhere.pt, which does"):
        ckpt.load(tmp_path / "gone.pt")


def test_a_checkpoint_of_another_format_version_is_named(tmp_path):
    path = ckpt.save_atomic(payload(), tmp_path / "a.pt")
    path.write_bytes(path.read_bytes().replace(b"CHECKPOINT 1 ", b"CHECKPOINT 2 ", 1))
    with pytest.raises(ValueError, match="a.pt is a labnn checkpoint of format 2; this labnn reads"):
        ckpt.load(path)


def test_a_payload_that_is_not_a_dict_is_refused(tmp_path):
    refused = re_escape(f"cannot save {tmp_path / 'a.pt'}: the payload must be a dict")
    with pytest.raises(TypeError, match=refused):
        ckpt.save_atomic(torch.zeros(3), tmp_path / "a.pt")
    write_pickled(tmp_path / "t.pt", torch.zeros(3))  # a valid header and checksum, then a tensor
    with pytest.raises(ValueError, match="t.pt holds a Tensor, not a dict of named entries"):
        ckpt.load(tmp_path / "t.pt")


@pytest.mark.parametrize("old, cls", [
    ("labnn.train_config.TrainConfig", "TrainConfig"),
    ("labnn.feedback.FeedbackState", "FeedbackState"),
    ("labnn.feedback_kv.KVState", "KVState"),
])
def test_a_checkpoint_written_before_the_sub_packages_still_loads(tmp_path, old, cls):
    """Checkpoints of labnn 0.1 name dataclasses by their module of then (`labnn.feedback_kv`):
    they are read at the module's new place, nothing is lost."""
    import dataclasses

    from labnn.feedback import FeedbackState, KVState
    from labnn.training import TrainConfig

    kinds = {"TrainConfig": TrainConfig, "FeedbackState": FeedbackState, "KVState": KVState}
    kind = kinds[cls]
    fields = {f.name: None for f in dataclasses.fields(kind)}
    if kind is TrainConfig:
        fields = dataclasses.asdict(TrainConfig())
    path = tmp_path / "old.pt"
    ckpt.save_atomic({"x": {"__dataclass__": old, **fields}}, path)
    assert type(ckpt.load(path)["x"]) is kind


def test_a_name_outside_labnn_is_still_refused_after_the_move(tmp_path):
    path = tmp_path / "forged.pt"
    ckpt.save_atomic({"x": {"__dataclass__": "labnn.os.system"}}, path)
    with pytest.raises(ValueError, match="not a dataclass of labnn"):
        ckpt.load(path)


def test_a_checkpoint_naming_a_trainer_builds_nothing(tmp_path):
    """A package reader's finding: the loader built any dataclass of labnn, `Trainer` too,
    whose construction picked the device a forged config named ("audit": `nn.Module.to`
    patched and a torch function mode left on for the rest of the process), then failed
    with an AttributeError. Only labnn's data classes are built now."""
    import torch.nn as nn

    to = nn.Module.to
    config = {"__dataclass__": "labnn.training.config.TrainConfig", "device": "audit",
              "seq_len": 4, "batch_size": 1}
    path = tmp_path / "forged.pt"
    ckpt.save_atomic({"x": {"__dataclass__": "labnn.training.trainer.Trainer", "model": {},
                            "train_ids": torch.zeros(10, dtype=torch.long),
                            "val_ids": torch.zeros(10, dtype=torch.long),
                            "config": config}}, path)
    with pytest.raises(ValueError, match=r"names 'labnn\.training\.trainer\.Trainer', which is "
                                         r"not a dataclass of labnn's checkpoint data"):
        ckpt.load(path)
    assert nn.Module.to is to
    torch.ones(2, device="cpu:0") + torch.ones(2)  # no device audit left behind


def test_the_checkpoint_data_classes_are_labnn_s_data_classes():
    """Every class of `PAYLOAD` exists, is a dataclass and round-trips by its name."""
    import dataclasses
    from labnn.training.plain_data import PAYLOAD, _labnn_dataclass

    for name in PAYLOAD:
        cls = _labnn_dataclass(name)
        assert cls is not None and dataclasses.is_dataclass(cls), name
