"""Tests of the program-tracking task: the generator agrees with an interpreter, seeds, the split, the
tokenizer, the printed-value mask, the scorer and the tiny training loop."""

import random

import pytest
import torch

from labnn.data.program_language import run_program
from labnn.data.programs import (
    ProgramData,
    ProgramTokenizer,
    generate_program,
    printed_accuracy,
    program_task,
)
from labnn.training.tasks import train_on_programs


def test_printed_values_match_an_interpreter():
    rng = random.Random(0)
    for _ in range(200):
        words = generate_program(rng, n_vars=4, n_statements=30, max_value=5)
        shown = [int(words[i + 2]) for i, w in enumerate(words) if w == "print"]
        assert run_program(words) == shown
        assert all(0 <= int(w) <= 5 for w in words if w.isdigit())


def test_every_statement_kind_occurs():
    words = sum((generate_program(random.Random(s), 3, 20) for s in range(20)), [])
    for word in ("=", "++", "--", "if", ">", "<", ":", "print"):
        assert word in words


def test_seeded_and_split_is_disjoint():
    train, test, tok = program_task(300, 100, n_statements=8, seed=3)
    again, _, _ = program_task(300, 100, n_statements=8, seed=3)
    other, _, _ = program_task(300, 100, n_statements=8, seed=4)
    assert torch.equal(train.x, again.x) and not torch.equal(train.x, other.x[:, : train.x.size(1)])
    rows = lambda d: {tok.decode(torch.cat([d.x[i], d.y[i, -1:]])) for i in range(d.x.size(0))}  # noqa: E731
    assert len(rows(train)) == 300 and len(rows(test)) == 100 and not rows(train) & rows(test)


def test_mask_marks_printed_values_only():
    train, _, tok = program_task(50, 10, n_statements=10, seed=0)
    assert train.x.shape == train.y.shape == train.mask.shape
    assert torch.equal(train.x[:, 1:], train.y[:, :-1])
    prev = train.x[train.mask]  # the token before a printed value is the variable's name
    assert all(tok.words[i] in tok.variables for i in prev.tolist())
    assert all(tok.words[i].isdigit() for i in train.y[train.mask].tolist())
    assert int(train.mask.sum()) == sum(tok.decode(r).split().count("print") for r in train.x)


def test_tokenizer_round_trip_and_errors():
    tok = ProgramTokenizer(n_vars=3, max_value=9)
    text = "a = 3 ; if a > 2 : b ++ ; print b 1 ;"
    assert tok.decode(tok.encode(text)) == text
    assert tok.vocab_size == len(set(tok.words)) == 10 + 3 + 10
    with pytest.raises(ValueError, match=r"text contains 'z', not in the program vocabulary"):
        tok.encode("z = 1 ;")
    with pytest.raises(ValueError, match="n_vars must be an int in \\[1, 26\\], got 0"):
        ProgramTokenizer(0)
    with pytest.raises(ValueError, match="n_train must be a positive int, got 0"):
        program_task(0, 5)


def test_printed_accuracy_scores_printed_values_only():
    _, test, tok = program_task(10, 20, n_statements=10, seed=1)
    perfect = torch.nn.functional.one_hot(test.y, tok.vocab_size).float()
    assert printed_accuracy(perfect, test) == 1.0
    perfect[~test.mask] = 0.0  # everything else wrong changes nothing
    perfect[..., tok.pad_id][~test.mask] = 1.0
    assert printed_accuracy(perfect, test) == 1.0
    assert printed_accuracy(torch.zeros_like(perfect), test) == pytest.approx(
        (test.y[test.mask] == 0).float().mean().item()
    )
    with pytest.raises(ValueError, match=r"logits have shape \[1, 2, 3\], expected"):
        printed_accuracy(torch.zeros(1, 2, 3), test)
    with pytest.raises(ValueError, match="no printed values"):
        printed_accuracy(perfect, ProgramData(test.x, test.y, torch.zeros_like(test.mask)))


def test_train_on_programs_learns_the_easy_part():
    """A bag-of-tokens model cannot track values but learns that a value follows `print x`."""
    train, test, tok = program_task(200, 50, n_statements=6, seed=0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(tok.vocab_size, 8), torch.nn.Linear(8, tok.vocab_size))
    result = train_on_programs(model, train, test, iters=30, batch_size=16, lr=1e-2, logits_fn=lambda m, x: m(x))
    assert set(result) == {"train_acc", "test_acc", "seconds", "final_loss"}
    assert 0.0 <= result["test_acc"] <= 1.0 and result["final_loss"] < 3.0


def test_program_task_refuses_more_programs_than_exist():
    """One variable, one statement, values 0..1: a few dozen distinct programs, never 100 (issue 12: looped forever)."""
    with pytest.raises(ValueError, match=r"only \d+ distinct programs.*n_train \+ n_test = 100"):
        program_task(60, 40, n_vars=1, n_statements=1, max_value=1)


def test_evaluate_programs_with_a_last_batch_without_printed_values():
    from labnn.training.tasks import evaluate_programs

    _, test, tok = program_task(10, 5, n_statements=10, seed=1)
    mask = test.mask.clone()
    mask[-1] = False  # the last program prints nothing
    data = ProgramData(test.x, test.y, mask)
    perfect = lambda m, x: torch.nn.functional.one_hot(  # noqa: E731
        torch.cat([x[:, 1:], x[:, -1:]], 1), tok.vocab_size).float()
    model = torch.nn.Linear(1, 1)
    assert evaluate_programs(model, data, perfect, batch_size=4) == 1.0  # batches of 4, 1: the last has none
    with pytest.raises(ValueError, match="no printed values"):
        evaluate_programs(model, ProgramData(test.x, test.y, torch.zeros_like(mask)), perfect)


def test_small_batches_of_programs_without_prints_give_a_finite_loss():
    """A batch of programs that print nothing has no target: its loss was a mean over zero elements, NaN
    (issue 12). Here only one program prints; the loss must be its loss, finite."""
    train, test, tok = program_task(40, 20, n_statements=4, seed=0)
    r = int(train.mask.any(1).nonzero()[0])  # the first program that prints
    mask = torch.zeros_like(train.mask)
    mask[r] = train.mask[r]
    only_first = ProgramData(train.x, train.y, mask)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(tok.vocab_size, 8), torch.nn.Linear(8, tok.vocab_size))
    with torch.no_grad():
        logits = model(train.x[r])
        want = torch.nn.functional.cross_entropy(logits[mask[r]], train.y[r][mask[r]]).item()
    result = train_on_programs(model, only_first, test, iters=1, batch_size=1, lr=0.0, logits_fn=lambda m, x: m(x))
    assert result["final_loss"] == pytest.approx(want)
    none = ProgramData(train.x, train.y, torch.zeros_like(train.mask))
    with pytest.raises(ValueError, match="no printed values"):
        train_on_programs(model, none, test, iters=1, batch_size=1, logits_fn=lambda m, x: m(x))


def test_train_on_programs_labels_its_progress_bar(monkeypatch):
    """Issue 31: six bars in notebook 05 read "100%|###| 30/30" with no name; the default label is the
    model's class."""
    import labnn.training.tasks as tasks

    labels = []
    monkeypatch.setattr(tasks, "progress", lambda it, desc=None: labels.append(desc) or it)
    train, test, tok = program_task(40, 20, n_statements=4, seed=0)
    model = torch.nn.Sequential(torch.nn.Embedding(tok.vocab_size, 8), torch.nn.Linear(8, tok.vocab_size))
    train_on_programs(model, train, test, iters=1, batch_size=4, logits_fn=lambda m, x: m(x))
    train_on_programs(model, train, test, iters=1, batch_size=4, logits_fn=lambda m, x: m(x), desc="XL")
    assert labels == ["Sequential", "XL"]


def test_train_on_programs_gives_back_every_module_its_mode():
    """It trained in training mode and left the model there: a model handed in for
    evaluation came back in training mode (its dropout on in what followed). Each module
    keeps its own mode (one in eval mode on purpose stays so)."""
    train, test, tok = program_task(40, 10, n_statements=4, seed=0)
    model = torch.nn.Sequential(torch.nn.Embedding(tok.vocab_size, 8), torch.nn.Dropout(0.1),
                                torch.nn.Linear(8, tok.vocab_size))
    seen = []
    model[1].register_forward_hook(lambda m, i, o: seen.append(m.training))
    model.eval()
    train_on_programs(model, train, test, iters=2, batch_size=4, logits_fn=lambda m, x: m(x))
    assert seen[:2] == [True, True] and not any(m.training for m in model.modules())
    model.train()[1].eval()
    train_on_programs(model, train, test, iters=1, batch_size=4, logits_fn=lambda m, x: m(x))
    assert [m.training for m in model] == [True, False, True]
