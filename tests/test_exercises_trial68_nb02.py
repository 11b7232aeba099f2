"""Trial 68, notebook 02 (a learner's trial of Exercise 5, the relative scores).

Told only that the scores differ before: u and v both with their heads reversed
(`u.flip(0)`, `v.flip(0)`), head 0's position encodings used for every head
(`r[:, :1].expand_as(r)`), and r^T made with a reshape after another permutation
(`r.permute(2, 0, 1).reshape(H, D_h, S)`); told "a float16/bfloat16 step or a small
constant": a root taken in float16 (`torch.tensor(d, dtype=torch.float16).sqrt()`). Each is
named now, with the like mistakes around it (r's heads reversed, the heads rolled or mixed
up, one other head's for all, every permutation of r before the reshape, a bfloat16 root, an
rsqrt in float16).
"""
import itertools
import math

import torch

from checker_helpers import trial_case, trial_tests

from labnn.exercises.transformer_xl import check_relative_scores
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _scores(r_t=lambda r: r.permute(1, 2, 0), bias=lambda b: b, root=math.sqrt):
    """The scores with r^T made as `r_t(r)`, each bias passed through `bias`, divided by
    `root(d_head)`."""
    def relative_scores(q, k, r, u, v):
        content = (q + bias(u)[:, None]) @ k.mT
        position = relative_shift((q + bias(v)[:, None]) @ r_t(r))
        return (content + position) / root(q.size(-1))
    return relative_scores


case("scores_u_and_v_heads_reversed", check_relative_scores,
     _scores(bias=lambda b: b.flip(0)), r"u's and v's heads are reversed \(u\.flip\(0\), "
     r"v\.flip\(0\)\?\).*as (it|they) comes?")
case("scores_r_heads_reversed", check_relative_scores,
     _scores(r_t=lambda r: r.flip(1).permute(1, 2, 0)), r"r's heads are reversed \(r\.flip\(1\)")
case("scores_r_head0_every_head", check_relative_scores,
     _scores(r_t=lambda r: r[:, :1].expand_as(r).permute(1, 2, 0)),
     r"every head uses head 0's position encodings r \(r\[:, :1\]\)")
case("scores_all_head0_every_head", check_relative_scores,
     _scores(r_t=lambda r: r[:, :1].expand_as(r).permute(1, 2, 0),
             bias=lambda b: b[:1].expand_as(b)),
     r"every head uses head 0.s content bias u, position bias v and position encodings r")
case("scores_u_head0_every_head", check_relative_scores,
     lambda q, k, r, u, v: _scores()(q, k, r, u[:1].expand_as(u), v), r"head 0's content bias u")


def _reshaped(order, to_mt):
    """r^T as r.permute(order).reshape(H, D_h, S), or .reshape(H, S, D_h).mT."""
    def r_t(r):
        s, h, d = r.shape
        x = r.permute(*order)
        return x.reshape(h, s, d).mT if to_mt else x.reshape(h, d, s)
    return r_t


RESHAPED = r"r\^T is made with reshape: r{}\.reshape\(H, {}\){} regroups.*r\.permute\(1, 2, 0\)"
for order, to_mt in itertools.product(itertools.permutations(range(3)), (False, True)):
    if order == ((1, 0, 2) if to_mt else (1, 2, 0)):
        RIGHT[f"scores_r_permute_{''.join(map(str, order))}_reshape"] = (
            check_relative_scores, _scores(r_t=_reshaped(order, to_mt)))
        continue
    if order == (0, 1, 2) and to_mt:
        continue  # r.reshape(H, S, D_h): named in tests/test_exercises_trial.py
    said = "" if order == (0, 1, 2) else r"\.permute\({}\)".format(", ".join(map(str, order)))
    case(f"scores_r_permute_{''.join(map(str, order))}_reshape{'_mt' * to_mt}",
         check_relative_scores, _scores(r_t=_reshaped(order, to_mt)),
         RESHAPED.format(said, "S, D_h" if to_mt else r"D_h, S", r"\.mT" if to_mt else ""))

for dtype in (torch.float16, torch.bfloat16):
    name = str(dtype).split(".")[1]
    case(f"scores_root_in_{name}", check_relative_scores,
         _scores(root=lambda d, dtype=dtype: torch.tensor(d, dtype=dtype).sqrt()),
         rf"the root itself is rounded to {name}.*math\.sqrt\(q\.size\(-1\)\)")
case("scores_rsqrt_in_float16", check_relative_scores, lambda q, k, r, u, v: _scores(
    root=lambda d: 1)(q, k, r, u, v) * torch.tensor(q.size(-1), dtype=torch.float16).rsqrt(),
     r"the root itself is rounded to float16")
HEADS = {"rolled": (lambda b: b.roll(1, 0),
                    r"u's and v's heads are rolled by 1 \(u\.roll\(1, 0\), v\.roll\(1, 0\)\?\)"),
         "last": (lambda b: b[-1:].expand_as(b), r"every head uses head 2's content bias u and "
                  r"position bias v \(u\[2:3\], v\[2:3\]\)"),
         "swapped": (lambda b: b[[1, 0, 2]], r"u's and v's heads are read \[1, 0, 2\] "
                     r"\(u\[\[1, 0, 2\]\], v\[\[1, 0, 2\]\]\)")}
for tag, (heads, said) in HEADS.items():
    case(f"scores_u_and_v_heads_{tag}", check_relative_scores, _scores(bias=heads), said)
RIGHT["scores_r_T_transposed"] = (check_relative_scores,
                                  _scores(r_t=lambda r: r.permute(2, 1, 0).transpose(0, 1)))
RIGHT["scores_root_float32_tensor"] = (check_relative_scores,
                                       _scores(root=lambda d: torch.tensor(d).sqrt()))
RIGHT["scores_root_float64_tensor"] = (check_relative_scores, _scores(
    root=lambda d: torch.tensor(d, dtype=torch.float64).sqrt().item()))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
