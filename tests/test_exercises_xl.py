"""Each checker of notebook 02 passes a correct solution and names each typical
mistake."""

import math

import pytest
import torch
import torch.nn.functional as F

from labnn.exercises.transformer_xl import relative_scores as ex
from labnn.exercises.transformer_xl import segment_memory as ex_memory
from labnn.exercises.grading import ExerciseNotDone
from labnn.nn.attention import causal_mask
from labnn.xl.relative_attention import relative_shift
from labnn.xl.memory import segment_mask, update_memory

from checker_helpers import fails_with, passes


# ---------- Exercise 1: memory update ----------

def memory(mem, h, mem_len, *, dim=1, detach=True, keep="last", zero_trap=False,
           old=True):
    states = h if mem is None or not old else torch.cat([mem, h], dim=dim)
    if keep == "first":
        out = states[:, :mem_len]
    elif keep == "all":
        out = states
    elif zero_trap:
        out = states[:, -mem_len:]
    else:
        out = states[:, states.size(1) - min(mem_len, states.size(1)):]
    return out.detach() if detach else out


def test_update_memory_correct(capsys):
    passes(ex_memory.check_update_memory, memory, capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda mem, h, n: memory(mem, h, n, zero_trap=True),
     r"mem_len = 0 you kept everything: x\[:, -0:\]"),
    (lambda mem, h, n: memory(mem, h, n, detach=False),
     r"still attached to the graph: call \.detach\(\)"),
    (lambda mem, h, n: memory(mem, h, n, keep="first"), "kept the oldest states"),
    (lambda mem, h, n: memory(mem, h, n, old=False), "dropped the old memory"),
    (lambda mem, h, n: memory(mem, h, n, keep="all"),
     "kept all 9 states: keep only the last mem_len = 6"),
    (lambda mem, h, n: memory(mem, h, n) + 1e-3 * (torch.arange(8) == 3),
     r"differs from the reference at 12 of 96 entries.* at \[b=\d, m=\d, d=3\]"),
    (lambda mem, h, n: update_memory(mem, h, n), "calls labnn's own `update_memory`"),
])
def test_update_memory_mistakes(fn, match):
    fails_with(ex_memory.check_update_memory, fn, "memory update: .*" + match)


@pytest.mark.parametrize("dim, match", [(0, "along the batch axis"),
                                        (-1, r"along the features \(the last axis\)")])
def test_concatenation_along_the_wrong_axis_is_named(dim, match):
    # issue 28: M != T, so torch.cat along the batch or the features fails inside the
    # learner's own code; the error is named, not passed on raw
    fails_with(ex_memory.check_update_memory,
               lambda mem, h, n: memory(mem, h, n, dim=dim),
               match=match + r".*fails here because M != T.*torch.cat\(\[mem, h\], dim=1\)")


def test_update_memory_that_writes_into_mem_is_rejected():
    def in_place(mem, h, mem_len):
        out = memory(mem, h, mem_len)
        if mem is not None:
            mem.zero_()  # reuses the old memory's storage
        return out

    fails_with(ex_memory.check_update_memory, in_place,
               r"update_memory\(mem, h, 6\) modified its input `mem` in place \(first "
               r"change at \[0, 0, 0\]\)")


def test_stub_is_not_done():
    def stub(mem, h, mem_len):
        raise NotImplementedError()

    with pytest.raises(ExerciseNotDone, match="not solved yet .* open Hint 1 below "
                                              "the cell"):
        ex_memory.check_update_memory(stub)


# ---------- Exercise 2: segment mask ----------

def seg_mask(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def test_segment_mask_correct(capsys):
    passes(ex_memory.check_segment_mask, seg_mask, capsys)


def test_update_memory_with_its_parameters_swapped_is_named():
    """def update_memory(h, mem, mem_len) gets mem in `h`: named, not 'wrong order'."""
    fails_with(ex_memory.check_update_memory, lambda h, mem, mem_len: memory(mem, h, mem_len),
               r"calls update_memory\(mem, h, mem_len\), by position: your parameters are "
               r"\(h, mem, mem_len\), in another order, so your `h` receives mem")


def test_segment_mask_with_parameters_of_its_own_names_is_accepted(capsys):
    """Only the exercise's own names in another order are a swap; other names are free."""
    passes(ex_memory.check_segment_mask, lambda size, seg, mem: seg_mask(size, seg, mem),
           capsys)
    passes(ex_memory.check_segment_mask, lambda n, *sizes: seg_mask(n, *sizes), capsys)


def _ij(n):
    return torch.arange(n)[:, None], torch.arange(n)[None, :]


def _start(n, s):
    return (torch.arange(n)[:, None] // s) * s


@pytest.mark.parametrize("fn, match", [
    (lambda n, s, m: _ij(n)[1] <= _ij(n)[0], "is the plain causal mask"),
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] >= _ij(n)[0] - m),
     "is a sliding window"),
    (lambda n, s, m: seg_mask(n, s, m).T, "is transposed: row i is the query"),
    (lambda n, s, m: ~seg_mask(n, s, m), "is inverted"),
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] >= _start(n, s)),
     "ignores the memory"),
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] > _start(n, s) - m),
     "off by one at the far end: the memory holds mem_len"),
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] >= _start(n, s) - m - 1),
     "reaches mem_len \\+ 1 positions"),
    (lambda n, s, m: (_ij(n)[1] < _ij(n)[0]) & (_ij(n)[1] >= _start(n, s) - m),
     "forbids the diagonal"),
    (lambda n, s, m: seg_mask(n, s, m).float(),
     "has dtype torch.float32, expected torch.bool"),
    (lambda n, s, m: seg_mask(n, s, m)
     | (torch.arange(n)[None, :] == torch.arange(n)[:, None] + 1),
     r"lets a query see a future key, at \[i=0, j=1\]"),
    (lambda n, s, m: seg_mask(n, s, m) & ~((_ij(n)[0] == 9) & (_ij(n)[1] == 5)),
     r"segment_mask\(10, 4, 3\) differs at \[i=9, j=5\] .*segment starting at 8, so it "
     r"sees keys 5 to 9"),
    (segment_mask, "calls labnn's own `segment_mask`"),
])
def test_segment_mask_mistakes(fn, match):
    fails_with(ex_memory.check_segment_mask, fn, "segment mask: .*" + match)


# ---------- Exercise 3: relative distances ----------

def distances(t, m):
    return m + torch.arange(t)[:, None] - torch.arange(m + t)[None, :]


def test_relative_distances_correct(capsys):
    passes(ex.check_relative_distances, distances, capsys)


@pytest.mark.parametrize("fn, match", [
    (lambda t, m: torch.arange(t)[:, None] - torch.arange(m + t)[None, :],
     "you computed i - j"),
    (lambda t, m: -distances(t, m), "the sign is flipped"),
    (lambda t, m: distances(t, m).abs(), "you took the absolute value"),
    (lambda t, m: distances(t, m).clamp(min=0),
     r"the keys after the query \(j > m \+ i\) get 0"),
    (lambda t, m: distances(t, m) - 1, "is off by one"),
    (lambda t, m: distances(t, m).float(),
     r"has dtype torch.float32: .* must be a LongTensor"),
    (lambda t, m: distances(t, m).T, r"has shape \[9, 4\] = \[S, T\]"),
    (lambda t, m: m + torch.arange(t)[:, None] - torch.arange(m)[None, :],
     r"= \[T, M\]: the keys are the memory"),
    (lambda t, m: m + torch.arange(t)[:, None] - torch.arange(t)[None, :],
     r"= \[T, T\]: the keys include"),
    (lambda t, m: distances(t, m).int(), "has dtype torch.int32, expected torch.int64"),
    (lambda t, m: distances(t, m).index_put_((torch.tensor(2), torch.tensor(8)),
                                             torch.tensor(0)),
     r"(differs from the reference at 1 of 36 .*|not at the keys after it .*) at "
     r"\[i=2, j=8\] \(yours 0, expected -1\)"),
])
def test_relative_distances_mistakes(fn, match):
    fails_with(ex.check_relative_distances, fn, "relative distances: .*" + match)


# ---------- Exercise 4: relative shift ----------

def shift(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def shift_loop(x):
    t = x.size(-2)
    rows = [x[..., i, :].roll(-(t - 1 - i), dims=-1) for i in range(t)]
    return torch.stack(rows, dim=-2)


def test_relative_shift_correct(capsys):
    passes(ex.check_relative_shift, shift, capsys)
    # a loop is slow but right on every visible entry
    passes(ex.check_relative_shift, shift_loop, capsys)


def _roll_rows(x, amount):
    rows = [x[..., i, :].roll(-amount(i), dims=-1) for i in range(x.size(-2))]
    return torch.stack(rows, dim=-2)


@pytest.mark.parametrize("fn, match", [
    (lambda x: x.clone(), "come back unshifted"),
    (lambda x: shift(x.flip(-1)), "reads the distances in ascending order"),
    (lambda x: F.pad(x, (0, 1))
     .reshape(*x.shape[:-2], x.size(-1) + 1, x.size(-2))[..., :-1, :].reshape(x.shape),
     "padded on the right"),
    (lambda x: F.pad(x, (1, 0))
     .reshape(*x.shape[:-2], x.size(-1) + 1, x.size(-2))[..., :-1, :].reshape(x.shape),
     "dropped the last row"),
    (lambda x: _roll_rows(x, lambda i: i), "row i slides left by i"),
    (lambda x: F.pad(x, (1, 0)).reshape(x.size(-1) + 1, -1)[1:].reshape(x.shape),
     "drops the leading dimensions, which mixes the rows of different batch entries "
     "and heads"),
    (lambda x: _roll_rows(x, lambda i: -(x.size(-2) - 1 - i)), "the rows slide right"),
    (lambda x: shift(x).transpose(-2, -1), r"= \[B, H, S, T\]"),
    (lambda x: F.pad(x, (1, 0)), r"= \[B, H, T, S \+ 1\]"),
    (lambda x: relative_shift(x), "calls labnn's own `relative_shift`"),
    (lambda x: shift(x.mul_(1.0).add_(0.0).index_fill_(-1, torch.tensor([0]), 0.0)),
     "modified its input `x` in place"),
    (lambda x: shift(x) + 1e-3 * (torch.arange(4)[:, None] == 3),
     r"on the entries a query may see \(j <= M \+ i\) differs from the reference at 54 "
     r"of 180 entries.* at \[b=\d, h=\d, i=3, j=\d\]"),
])
def test_relative_shift_mistakes(fn, match):
    fails_with(ex.check_relative_shift, fn, "relative shift: .*" + match)


def test_relative_shift_ignores_future_entries(capsys):
    def masked(x):
        # the future entries are left unspecified: zeros there, at any size
        t, s = x.shape[-2:]
        return shift(x).masked_fill(~causal_mask(t, s, device=x.device), 0.0)

    passes(ex.check_relative_shift, masked, capsys)


# ---------- Exercise 5: relative attention scores ----------

def scores(q, k, r, u, v, *, use_u=True, use_v=True, swap=False, scale=0.5,
           do_shift=True, in_place=False):
    if swap:
        u, v = v, u
    if in_place:
        q += u[:, None]  # mutates the caller's q
        qu = q
    else:
        qu = q + (u[:, None] if use_u else 0)
    content = torch.einsum("bhid,bhjd->bhij", qu, k)
    qv = (q - u[:, None] if in_place else q) + (v[:, None] if use_v else 0)
    position = torch.einsum("bhid,rhd->bhir", qv, r)
    return (content + (shift(position) if do_shift else position)) / q.size(-1) ** scale


def test_relative_scores_correct(capsys):
    passes(ex.check_relative_scores, scores, capsys)


@pytest.mark.parametrize("kwargs, match", [
    (dict(swap=True),
     r"the biases are swapped: u \(the content bias\) goes with the content keys k"),
    (dict(use_u=False), r"term \(c\) is missing"),
    (dict(use_v=False), r"term \(d\) is missing"),
    (dict(use_u=False, use_v=False), r"terms \(c\) and \(d\) are missing"),
    (dict(scale=0), "the scores are not scaled"),
    (dict(scale=1), "you divided by d_head: divide by sqrt"),
    (dict(scale=0.5 * math.log(24) / math.log(8)),
     r"divided by sqrt\(n_heads \* d_head\) = sqrt\(d_model\)"),
    (dict(do_shift=False), "indexed by distance, not by key: apply relative_shift"),
    (dict(in_place=True), "modified its input `q` in place"),
])
def test_relative_scores_mistakes(kwargs, match):
    fails_with(ex.check_relative_scores,
               lambda q, k, r, u, v: scores(q, k, r, u, v, **kwargs),
               "relative attention scores: .*" + match)


@pytest.mark.parametrize("fn, match", [
    (lambda q, k, r, u, v: torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
     / math.sqrt(q.size(-1)),
     "only the content terms are there"),
    (lambda q, k, r, u, v: shift(torch.einsum("bhid,rhd->bhir", q + v[:, None], r))
     / math.sqrt(q.size(-1)),
     "only the position terms are there"),
    (lambda q, k, r, u, v: scores(q, k, r, u, v)[..., :-1],
     r"has shape \[2, 3, 4, 8\] = \[B, H, T, D_h\], expected \[2, 3, 4, 9\] = \[B, H, "
     r"T, S\]"),
    (lambda q, k, r, u, v: scores(q, k, r, u, v) + 1e-3 * (torch.arange(9) == 0),
     r"differs from the reference at 24 of 180 entries.* at \[b=\d, h=\d, i=\d, j=0\]"),
])
def test_relative_scores_more_mistakes(fn, match):
    fails_with(ex.check_relative_scores, fn, "relative attention scores: .*" + match)


# ---------- learner trial 12 (issue 13 follow-up) ----------

def test_update_memory_detaching_h_in_place_is_rejected():
    def detach_in_place(mem, h, mem_len):
        h.detach_()  # cuts the caller's h from the current segment's graph
        return memory(mem, h, mem_len, detach=False)

    fails_with(ex_memory.check_update_memory, detach_in_place,
               r"detached its input `h` in place.*h.detach\(\)")


def test_update_memory_with_h_before_mem_is_named():
    fails_with(ex_memory.check_update_memory,
               lambda mem, h, n: (memory(h, mem, n) if mem is not None
                                  else memory(None, h, n)),
               r"in the wrong order: .*torch.cat\(\[mem, h\], dim=1\)")


def test_update_memory_crash_on_none_says_what_was_called(capsys):
    with pytest.raises(TypeError):
        ex_memory.check_update_memory(
            lambda mem, h, n: torch.cat([mem, h], 1)[:, -n:].detach()
        )
    err = capsys.readouterr().err
    assert "the check called update_memory(None, h, 6)" in err
    assert "must handle mem=None" in err


@pytest.mark.parametrize("fn, match", [
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] >= (_ij(n)[0] // s) - m),
     r"start\(i\) = \(i // seg_len\) \* seg_len"),
    (lambda n, s, m: (_ij(n)[1] <= _ij(n)[0]) & (_ij(n)[1] >= (_ij(n)[1] // s) * s - m),
     r"plain causal mask.*from the query's index i"),
])
def test_segment_mask_start_mistakes(fn, match):
    fails_with(ex_memory.check_segment_mask, fn, "segment mask: .*" + match)


def _lead(x):
    *lead, t, s = x.shape
    return lead, t, s


@pytest.mark.parametrize("fn, match", [
    (lambda x: F.pad(x, (0, 1))
     .reshape(*_lead(x)[0], x.size(-1) + 1, x.size(-2))[..., 1:, :].reshape(x.shape),
     r"padded on the right.*pad on the left: F.pad\(x, \(1, 0\)\)"),
    (lambda x: F.pad(x, (1, 0)).transpose(-2, -1)[..., 1:, :].reshape(x.shape),
     r"transpose.*reshape"),
    (lambda x: F.pad(x, (0, 0, 1, 0))
     .reshape(*_lead(x)[0], x.size(-1), x.size(-2) + 1)[..., 1:].reshape(x.shape),
     r"padded along T"),
    (lambda x: x.flip(-1), r"flip"),
])
def test_relative_shift_trial_mistakes(fn, match):
    fails_with(ex.check_relative_shift, fn, "relative shift: .*" + match)


def test_relative_shift_for_one_matrix_only_is_named():
    def two_d(x):
        t, s = x.shape[-2:]
        return F.pad(x, (1, 0)).reshape(s + 1, t)[1:].reshape(t, s)

    fails_with(ex.check_relative_shift, two_d,
               r"works on one \[T, S\] matrix but not on \[B, H, T, "
               r"S\].*reshape\(\*lead, s \+ 1, t\)")


def test_relative_scores_crash_says_what_was_called(capsys):
    # u [H, D_h] against q [B, H, T, D_h]: H != T, so q + u fails
    with pytest.raises(RuntimeError):
        ex.check_relative_scores(
            lambda q, k, r, u, v: torch.einsum("bhid,bhjd->bhij", q + u, k)
        )
    err = capsys.readouterr().err
    assert "the check called relative_scores(q, k, r, u, v)" in err
    assert "u[:, None]" in err


@pytest.mark.parametrize("fn, match", [
    (lambda q, k, r, u, v: torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
     / math.sqrt(q.size(-1))
     + shift(torch.einsum("bhid,rhd->bhir", q + v[:, None], r)),
     "only the content term is divided"),
    (lambda q, k, r, u, v: shift(torch.einsum("bhid,bhjd->bhij", q + u[:, None], k)
                                 + torch.einsum("bhid,rhd->bhir", q + v[:, None], r))
     / math.sqrt(q.size(-1)),
     "you shifted the sum of the two products"),
    (lambda q, k, r, u, v: scores(q, k, r.flip(0), u, v), r"r is reversed"),
])
def test_relative_scores_trial_mistakes(fn, match):
    fails_with(ex.check_relative_scores, fn, "relative attention scores: .*" + match)


def test_no_code_cell_outside_a_solution_reveals_it():
    import re
    from pathlib import Path

    import nbformat

    root = Path(__file__).resolve().parents[1] / "notebooks"
    solution = re.compile(r"<summary>\s*Solution\s*</summary>.*?```python\n(.*?)```",
                          re.S)
    for name in ("01_attention.ipynb", "02_transformer_xl.ipynb"):
        nb = nbformat.read(root / name, as_version=4)
        code = [" ".join(c.source.split()) for c in nb.cells if c.cell_type == "code"]
        for cell in nb.cells:
            markdown = cell.cell_type == "markdown"
            found = solution.search(cell.source) if markdown else None
            for line in found.group(1).splitlines() if found else []:
                expr = line.split("#")[0].strip()
                expr = expr.split(" = ", 1)[-1].removeprefix("return ").strip()
                if len(expr) >= 25 and '"""' not in expr:
                    revealing = [c for c in code
                                 if expr in c and "raise NotImplementedError" not in c]
                    assert not revealing, (
                        f"{name}: a code cell shows the solution line {expr!r}"
                    )


# ---------- gradients flow through the answer (issue 28) ----------

def test_relative_shift_detached_clone_is_refused():
    fails_with(ex.check_relative_shift, lambda x: shift(x).detach().clone(),
               "relative shift: .*no grad_fn")


def test_relative_scores_under_no_grad_is_refused():
    def no_grad(q, k, r, u, v):
        with torch.no_grad():
            return scores(q, k, r, u, v)

    fails_with(ex.check_relative_scores, no_grad,
               r"relative attention scores: .*no grad_fn.*torch.no_grad\(\)")


def test_relative_scores_with_detached_biases_is_refused():
    fails_with(ex.check_relative_scores,
               lambda q, k, r, u, v: scores(q, k, r, u.detach(), v.detach()),
               "relative attention scores: `u`( and `v`)? gets? no gradient")


def _biased(side_u, side_v):
    """Relative scores with u and v each on the query side (q), the key side (k) or left
    out (None)."""
    def relative_scores(q, k, r, u, v):
        ku, rv = k + u[:, None], r + v
        content = {"q": (q + u[:, None]) @ k.mT, "k": q @ ku.mT, None: q @ k.mT}[side_u]
        rr = {"q": r, "k": rv, None: r}[side_v].permute(1, 2, 0)
        position = (q + v[:, None] if side_v == "q" else q) @ rr
        return (content + shift(position)) / math.sqrt(q.size(-1))
    return relative_scores


@pytest.mark.parametrize("side_u, side_v, match", [
    ("k", "q", r"yours adds u to the keys \(k \+ u\)\.$"),
    ("k", "k", r"yours adds u to the keys \(k \+ u\) and adds v to r \(r \+ v\)\.$"),
    ("k", None, r"yours adds u to the keys \(k \+ u\) and leaves v out\.$"),
    (None, "k", r"yours leaves u out and adds v to r \(r \+ v\)\.$"),
    ("q", "k", r"v is added to r: the position bias goes with the queries"),
])
def test_relative_scores_bias_on_the_key_side_is_named(side_u, side_v, match):
    """Issue 28, trial 7: a bias added to the keys (k + u, r + v) is named, with the
    query-side form, whichever the other bias does."""
    fails_with(ex.check_relative_scores, _biased(side_u, side_v),
               r"relative attention scores: (u and v are query-side biases: \(q \+ u\) "
               r"k\^T and \(q \+ v\) r\^T.*)?" + match)
