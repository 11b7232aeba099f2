"""Trial 59, notebook 01: four wrong answers of Exercises 2 and 5 left over from trial 58, each
refused but named as another mistake or not at all: the empty rows zeroed with `mask.any(-1)`
without its `~` (read as a +inf fill; Exercise 5: "differs"), the scale written under
`if mask is not None:` (read as a scale forgotten; Exercise 5: "differs"), the weights
zeroed in place with `masked_fill_` (the advice named only `nan_to_num_`), and `k.T` on 3-D
keys in Exercise 2 and on the 4-D heads in Exercise 5 (the crash went on as torch's broadcast
error, under a notice about mask=None, or about functions reused on heads).
"""
import math
import os
import subprocess
import sys

from checker_helpers import trial_case, trial_tests

from labnn.exercises.self_attention import check_attention, check_multi_head_attention

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _attention(tilde=True, scale_always=True, in_place=False, k_t=False):
    def attention(q, k, v, mask=None):
        s = q @ (k.T if k_t else k.transpose(-2, -1))
        if scale_always:
            s = s / math.sqrt(q.size(-1))
        if mask is not None:
            if not scale_always:
                s = s / math.sqrt(q.size(-1))
            s = s.masked_fill(~mask, float("-inf"))
        w = s.softmax(-1)
        if mask is not None:
            empty = ~mask.any(-1, keepdim=True) if tilde else mask.any(-1, keepdim=True)
            w = w.masked_fill_(empty, 0.0) if in_place else w.masked_fill(empty, 0.0)
        return w @ v
    return attention


def _mha(**slips):
    attention = _attention(**slips)

    def multi_head_attention(x, mha, mask=None):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, mha.n_heads, -1).transpose(1, 2)
                   for z in mha.qkv(x).chunk(3, dim=-1))
        return mha.out_proj(attention(q, k, v, mask).transpose(1, 2).reshape(b, t, d))
    return multi_head_attention


NEGATED = r"zeroed the rows .*mask\.any\(-1\).*~mask\.any\(dim=-1, keepdim=True\)"
UNDER_IF = r"with mask=None your scores are not divided by sqrt\({}\).*if mask is not None"
case("any_without_tilde", check_attention, _attention(tilde=False),
     r"with an all-True mask too: you " + NEGATED)
case("scale_under_mask", check_attention, _attention(scale_always=False),
     UNDER_IF.format("d"))
case("masked_fill_in_place", check_attention, _attention(in_place=True),
     r"changed in place.*w\.masked_fill_\(\.\.\.\).*w = w\.masked_fill\(\.\.\.\)")
case("k_T", check_attention, _attention(k_t=True),
     r"k\.T reverses all three axes.*k\.transpose\(-2, -1\)")
case("mha_any_without_tilde", check_multi_head_attention, _mha(tilde=False),
     r"out_proj of zeros.*" + NEGATED)
case("mha_scale_under_mask", check_multi_head_attention, _mha(scale_always=False),
     UNDER_IF.format("D_h"))
case("mha_masked_fill_in_place", check_multi_head_attention, _mha(in_place=True),
     r"changed in place.*w = w\.masked_fill\(\.\.\.\)")
case("mha_k_T", check_multi_head_attention, _mha(k_t=True),
     r"reads \.T of a tensor of more than 2 axes.*k\.transpose\(-2, -1\)")
RIGHT["attention"] = (check_attention, _attention())
RIGHT["multi_head_attention"] = (check_multi_head_attention, _mha())

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


def test_k_t_warning_points_at_the_answer(tmp_path):
    """torch's deprecation of `x.T` on 3-D tensors, raised inside the checker's watch of
    torch calls, names the learner's line, not the checker's file. In a new process: torch
    warns of it once per process."""
    answer = tmp_path / "answer.py"
    answer.write_text(
        "import math\n"
        "from labnn.exercises.self_attention import check_attention\n"
        "def attention(q, k, v, mask=None):\n"
        "    return (q @ k.T / math.sqrt(q.size(-1))).softmax(-1) @ v\n"
        "try:\n    check_attention(attention)\nexcept Exception:\n    pass\n")
    run = subprocess.run([sys.executable, str(answer)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": os.getcwd()}, timeout=120)
    said = [line for line in run.stderr.splitlines() if "UserWarning" in line]
    assert len(said) == 1 and said[0].startswith(f"{answer}:4: "), run.stderr
