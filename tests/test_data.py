import hashlib

import pytest
import torch

from labnn.data import (
    CharTokenizer,
    load_tiny_shakespeare,
    num_stream_batches,
    order_task,
    random_batch,
    stream_batches,
    train_val_split,
)
from labnn.data import shakespeare


def test_corpus_is_verified():
    text = load_tiny_shakespeare()
    assert len(text) == shakespeare.SIZE and text.startswith("First Citizen:")


def test_corrupted_or_truncated_file_is_refused(tmp_path):
    path = tmp_path / shakespeare.FILENAME
    path.write_text("First Citizen:\nBefore we proceed")  # truncated
    with pytest.raises(ValueError, match="corrupted or truncated.*Delete it"):
        load_tiny_shakespeare(tmp_path)


def test_offline_download_says_how_to_provide_the_file(tmp_path, monkeypatch):
    def offline(*a, **k):
        raise OSError("no network")

    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", offline)
    with pytest.raises(RuntimeError, match="Offline\\? Copy the file to .*LABNN_DATA_DIR"):
        load_tiny_shakespeare(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no partial file left behind


def test_a_data_dir_that_does_not_exist_is_named_and_not_left_behind(tmp_path, monkeypatch):
    """A typo in LABNN_DATA_DIR, offline: the message told to set LABNN_DATA_DIR (it was
    set) and an empty folder of the typo's name was left behind."""
    def offline(*a, **k):
        raise OSError("no network")

    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", offline)
    typo = tmp_path / "shraed" / "data"
    monkeypatch.setenv("LABNN_DATA_DIR", str(typo))
    with pytest.raises(RuntimeError, match=rf"LABNN_DATA_DIR={typo} does not exist"):
        load_tiny_shakespeare()
    assert list(tmp_path.iterdir()) == []


def test_download_is_atomic_and_verified(tmp_path, monkeypatch):
    good = load_tiny_shakespeare().encode()

    class Response:
        def __init__(self, body):
            self.body = body

        def read(self):
            return self.body

        def __enter__(self):
            return self

        def __exit__(self, *a):
            return False

    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", lambda *a, **k: Response(good[:1000]))
    with pytest.raises(ValueError, match="corrupted or truncated"):
        load_tiny_shakespeare(tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setattr(shakespeare.urllib.request, "urlopen", lambda *a, **k: Response(good))
    assert load_tiny_shakespeare(tmp_path) == good.decode()
    assert hashlib.sha256((tmp_path / shakespeare.FILENAME).read_bytes()).hexdigest() == shakespeare.SHA256


def test_data_dir_env(tmp_path, monkeypatch):
    monkeypatch.setenv("LABNN_DATA_DIR", str(tmp_path))
    assert shakespeare.data_dir() == tmp_path


def test_tokenizer_round_trips_and_names_unknown_characters():
    tok = CharTokenizer.from_text("hello world")
    assert tok.decode(tok.encode("world hello")) == "world hello"
    assert tok.vocab_size == 8
    with pytest.raises(ValueError, match="character 'z' at position 3"):
        tok.encode("herzog")
    with pytest.raises(ValueError, match=r"id 8 is outside the vocabulary \[0, 8\)"):
        tok.decode([1, 8])
    with pytest.raises(ValueError, match=r"id -1 is outside"):
        tok.decode(torch.tensor([-1]))


def test_split_and_random_batches_are_shifted_windows():
    ids = torch.arange(1000)
    train, val = train_val_split(ids, 0.1)
    assert len(train) == 900 and val[0] == 900
    x, y = random_batch(train, 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == (4, 16) and torch.equal(y, x + 1) and torch.equal(x[:, 1:] - x[:, :-1], torch.ones(4, 15, dtype=torch.long))


def test_stream_rows_continue_across_batches():
    ids = torch.arange(1001)
    batches = list(stream_batches(ids, 4, 10))
    assert len(batches) == num_stream_batches(ids, 4, 10) == 25
    assert [r for _, _, r in batches] == [True] + [False] * 24
    for (x0, y0, _), (x1, _, _) in zip(batches, batches[1:]):
        assert torch.equal(x1[:, 0], x0[:, -1] + 1)  # row b of batch i+1 continues row b of batch i
        assert torch.equal(y0, x0 + 1)
    with pytest.raises(ValueError, match="too few"):
        num_stream_batches(torch.arange(20), 4, 10)


def test_order_task_needs_positions():
    x, y = order_task(2000, generator=torch.Generator().manual_seed(0))
    first = (x == 1).float().argmax(1) < (x == 2).float().argmax(1)
    assert torch.equal(first.long(), y)
    assert ((x == 1).sum(1) == 1).all() and ((x == 2).sum(1) == 1).all()
    assert 0.45 < y.float().mean() < 0.55
