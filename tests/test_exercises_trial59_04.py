"""Trial 59, notebook 04: Exercise 1's LayerNorm written out with torch's default, unbiased
variance (`m.std(-1)` or `m.var(-1)`, over D - 1) was refused as "k differs"; now named. Right:
the module itself, and the same written out with the biased variance.
"""
from checker_helpers import trial_case, trial_tests

from labnn.exercises.kv_sharing_stack import check_shared_kv

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _shared_kv(normalise):
    def shared_kv(m, norm, kv, n_heads):
        k, v = kv(normalise(m, norm)).chunk(2, dim=-1)
        return k.view(m.size(0), n_heads, -1), v.view(m.size(0), n_heads, -1)
    return shared_kv


def _written_out(variance):
    def normalise(m, norm):
        centred = m - m.mean(-1, keepdim=True)
        return centred / (variance(m) + norm.eps).sqrt() * norm.weight + norm.bias
    return normalise


UNBIASED = r"unbiased std.*D - 1.*var\(unbiased=False\).*norm\(m\)"
case("layer_norm_unbiased_var", check_shared_kv,
     _shared_kv(_written_out(lambda m: m.var(-1, keepdim=True))), UNBIASED)
case("layer_norm_unbiased_std", check_shared_kv, _shared_kv(
    lambda m, n: (m - m.mean(-1, keepdim=True)) / (m.std(-1, keepdim=True) + n.eps)
    * n.weight + n.bias), UNBIASED)
RIGHT["norm_module"] = (check_shared_kv, _shared_kv(lambda m, norm: norm(m)))
RIGHT["layer_norm_biased_var"] = (check_shared_kv, _shared_kv(
    _written_out(lambda m: m.var(-1, keepdim=True, unbiased=False))))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
