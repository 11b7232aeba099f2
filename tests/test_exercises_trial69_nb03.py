"""Trial 69, notebook 03 (a learner's trial and fix). A token loop that cached the layer
weights of the first model it saw (a global computed once) was told on the check's second
model, of GPT-2's 0.02 weights, 'off by up to 0.0019 ... keeps something between calls (a
global?) or has a small mistake in every step': that model now has the unit-scale weights of
the first, and m_0's weights are named as the first model's. A memory vector with 0.001 of the
top layer added showed its weights and softmax's as [0.479, 0.194, 0.327] and [0.479, 0.194,
0.326] with no word of their sum (1.001): a sum off by more than 1e-4 is named, and weights
are shown with the digits that tell them apart. A memory vector through `.numpy()` of `w`
(which requires grad) was told 'the layer count is a size written as a number'; a token loop
whose weights went through `.item()` or `float()` was told it used `model.layer_weights()`.
A mix written out for the notebook's 2 layers (w[0] * outs[0] + ... + w[2] * outs[2]) was
told only 'differs' on the 3-layer model of 0.02 weights: that model is unit-scale too and
its memory vectors are named there (layer 3 given no weight; a plain mean, which the
temperature rule read as softmax(w / -1e8)).
"""
import re

import pytest
import torch
from checker_helpers import feedback_token_loop, trial_case, trial_tests

from labnn.exercises.feedback_transformer import check_memory_vector, check_token_loop
from labnn.exercises.grading import ExerciseFailed

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def _weighted(weights):  # the memory vector: the step's outputs weighted by weights(model)
    return feedback_token_loop(lambda model, outs: sum(
        w * o for w, o in zip(weights(model), outs)))


def _cached_weights():
    kept = {}

    def mix(model, outs):
        if "w" not in kept:  # the first model's weights, kept for every later call
            kept["w"] = model.mix.logits.softmax(0)
        return torch.einsum("l,lbd->bd", kept["w"], torch.stack(outs))
    return feedback_token_loop(mix)


# Exercise 4: layer weights kept between calls, slightly off, or cut from the graph
case("token_loop_weights_kept_between_calls", check_token_loop, _cached_weights(),
     r"m_0 on a new model weights the layers by softmax of the check's FIRST model's "
     r"mix\.logits: weights kept between calls")
case("token_loop_top_layer_0_001_added", check_token_loop, feedback_token_loop(
    lambda model, outs: model.mix(torch.stack(outs)) + 0.001 * outs[-1]),
     r"sum to 1\.001, not one")
CUT = r"model\.mix\.logits` alone gets no gradient.*\.item\(\), float\(\)"
case("token_loop_weights_item", check_token_loop,
     _weighted(lambda model: [p.item() for p in model.mix.logits.softmax(0)]), CUT)
case("token_loop_weights_float", check_token_loop,
     _weighted(lambda model: [float(p) for p in model.mix.logits.softmax(0)]), CUT)

case("token_loop_mix_written_for_two_layers", check_token_loop, _weighted(
    lambda model: model.mix.logits.softmax(0)[:3]),
     r"m_0 gives layer 3 no weight")
case("token_loop_plain_mean_past_two_layers", check_token_loop, feedback_token_loop(
    lambda model, outs: model.mix(torch.stack(outs)) if len(outs) == 3
    else torch.stack(outs).mean(0)),
     r"m_0 is a plain mean of the layers, 1/\(L\+1\) each")

# Exercise 1: .numpy() of w, which requires grad
case("memory_vector_numpy_of_w", check_memory_vector, lambda xs, w: torch.einsum(
    "l,lbd->bd", torch.from_numpy(w.softmax(0).numpy()), xs),
     r"^(?!.*written as a number).*goes through numpy.*requires grad")
case("memory_vector_numpy_of_product", check_memory_vector, lambda xs, w: torch.from_numpy(
    (w.softmax(0)[:, None, None] * xs).numpy().sum(0)), r"goes through numpy.*requires grad")
RIGHT["token_loop_weights_summed"] = (check_token_loop, _weighted(
    lambda model: model.mix.logits.softmax(0)))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)


@pytest.mark.parametrize("shift", [0.0004, 0.001])
def test_weights_shown_apart(shift):
    """A memory whose weights move by less than 0.001 between two layers (its sum one):
    the message shows its weights and softmax's with the digits that tell them apart."""
    loop = feedback_token_loop(lambda model, outs: model.mix(torch.stack(outs))
                               + shift * (outs[-1] - outs[1]))
    with pytest.raises(ExerciseFailed) as info:
        check_token_loop(loop)
    lists = re.findall(r"\[[-0-9., e]+\]", str(info.value))
    assert len(lists) == 2 and lists[0] != lists[1], str(info.value)
