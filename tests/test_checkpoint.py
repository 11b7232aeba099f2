import os
import subprocess
import sys

import pytest
import torch

from labnn import checkpoint as ckpt


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
        "from labnn import checkpoint as ckpt\n"
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
