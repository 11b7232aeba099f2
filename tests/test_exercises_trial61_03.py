"""Trial 61, notebook 03 (a learner's trial, 200 answers): a token loop that keeps the empty
memory's keys and values on the model (`model._empty_kv`, set at its first call) passed
Exercise 4: the check's second call had the same batch size, dtype and device and ran no
second backward, all of which then fail (a batch of another size now follows). Misnamed: a
loop that made the memory vector but projected the top output, and one that fed step t the
token before it (sent to the memory path), and a memory vector weighted by exp(w), never
divided by its sum ("a constant factor").
"""
import torch
from checker_helpers import trial_case, trial_tests

from labnn.exercises.feedback_transformer import check_memory_vector, check_token_loop

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


def cached_empty_kv(model, tokens):
    x = model.embed(tokens)
    if not hasattr(model, "_empty_kv"):  # kept between calls
        model._empty_kv = tuple(map(list, model.project_memory(x[:, :0])))
    keys, values = list(model._empty_kv[0]), list(model._empty_kv[1])
    tops = []
    for t in range(tokens.size(1)):
        xs = [x[:, t]]
        for layer, k, v in zip(model.layers, keys, values):
            xs.append(layer(xs[-1], k, v))
        tops.append(xs[-1])
        nk, nv = model.project_memory(model.mix(torch.stack(xs))[:, None])
        keys = [torch.cat(p, 2) for p in zip(keys, nk)]
        values = [torch.cat(p, 2) for p in zip(values, nv)]
    return model.head(torch.stack(tops, 1))


case("token_loop_empty_kv_on_the_model", check_token_loop, cached_empty_kv,
     r"batch of 3.*keeps something between calls \(model\._empty_kv, which it sets\)")

def _loop(shift=False, project_top=False):
    def token_loop(model, tokens):
        x = model.embed(tokens)
        keys, values = map(list, model.project_memory(x[:, :0]))
        tops = []
        for t in range(tokens.size(1)):
            xs = [x[:, max(t - 1, 0)] if shift else x[:, t]]
            for layer, k, v in zip(model.layers, keys, values):
                xs.append(layer(xs[-1], k, v))
            tops.append(xs[-1])
            m = model.mix(torch.stack(xs))
            nk, nv = model.project_memory((xs[-1] if project_top else m)[:, None])
            keys = [torch.cat(p, 2) for p in zip(keys, nk)]
            values = [torch.cat(p, 2) for p in zip(values, nv)]
        return model.head(torch.stack(tops, 1))
    return token_loop


case("token_loop_projects_the_top", check_token_loop, _loop(project_top=True),
     r"reaches model\.project_memory is the top layer's output")
case("token_loop_shifted_input", check_token_loop, _loop(shift=True),
     r"step t reads the embedding of the token before it")
RIGHT["token_loop"] = (check_token_loop, _loop())
case("memory_vector_exp_unnormalised", check_memory_vector,
     lambda xs, w: torch.einsum("l,lbd->bd", w.exp(), xs), r"exp\(w\) as weights without dividing")

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
