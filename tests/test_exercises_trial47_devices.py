"""Trial 47b's device finding: an answer that cannot run on the meta device (a boolean mask
`d[keep]`, `.item()`, an `if` on a tensor's values: operations whose output size or flow
depends on values, which meta does not have) was not judged for its device at all, and
passed with a result made on the CPU, even one sent back there by `.cpu()`. The reference
of 05's Exercise 3 itself indexes by a boolean mask, so most natural answers escaped the
check. Such an answer is now run again with its inputs on labnn's stand-in accelerator
(`labnn.training.device_audit`, values and all), and named as the meta rerun names the
others; the same answers made where the inputs are pass."""
import math

from checker_helpers import trial_case, trial_tests

import torch

from labnn.data.recall import IGNORE
from labnn.exercises.self_attention import check_attention
from labnn.exercises.three_memories import check_accuracy_by_distance, check_make_recall

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)
DEVICE = r"(?i)on the CPU|device"


# ---- 05, Exercise 3: accuracy by distance

def _distances(y):
    labelled = y != IGNORE
    return labelled, labelled.long().cumsum(1) * labelled


def _by_loop(empty):
    def accuracy_by_distance(logits, y, max_distance):
        labelled, d = _distances(y)
        hit = logits.argmax(-1) == y
        out = empty(max_distance, logits)
        for k in range(1, max_distance + 1):
            out[k - 1] = hit[d == k].double().mean()  # a boolean mask: meta cannot
        return out
    return accuracy_by_distance


def _by_bincount(back_to_cpu):
    def accuracy_by_distance(logits, y, max_distance):
        labelled, d = _distances(y)
        keep = labelled & (d <= max_distance)
        hit = logits.argmax(-1) == y
        total = torch.bincount(d[keep] - 1, minlength=max_distance)
        right = torch.bincount(d[keep] - 1, weights=hit[keep].double(), minlength=max_distance)
        out = (right / total).to(logits.dtype)
        return out.cpu() if back_to_cpu else out
    return accuracy_by_distance


def _by_item(empty):
    def accuracy_by_distance(logits, y, max_distance):
        labelled, d = _distances(y)
        hit = logits.argmax(-1) == y
        out = empty(max_distance, logits)
        for k in range(1, max_distance + 1):
            at = d == k
            n = at.sum().item()  # a value read back: meta cannot
            out[k - 1] = (hit & at).sum().item() / n if n else float("nan")
        return out
    return accuracy_by_distance


def _on_cpu(n, logits):
    return torch.empty(n, dtype=logits.dtype)


def _where_logits_are(n, logits):
    return logits.new_empty(n)


case("acc_loop_cpu_result", check_accuracy_by_distance, _by_loop(_on_cpu), DEVICE)
case("acc_bincount_cpu", check_accuracy_by_distance, _by_bincount(True), DEVICE)
case("acc_item_cpu_result", check_accuracy_by_distance, _by_item(_on_cpu), DEVICE)
RIGHT["acc_loop_right"] = (check_accuracy_by_distance, _by_loop(_where_logits_are))
RIGHT["acc_bincount_right"] = (check_accuracy_by_distance, _by_bincount(False))
RIGHT["acc_item_right"] = (check_accuracy_by_distance, _by_item(_where_logits_are))


# ---- 05, Exercise 2: the recall task

def _recall_loop(full):
    def make_recall(filler, values, positions):
        n, t = filler.shape
        x, y = filler.clone(), full((n, t), filler)
        for i in range(n):
            p = positions[i].item()  # meta cannot
            x[i, p] = values[i]
            y[i, p + 1:] = values[i]
        return x, y
    return make_recall


def _recall_masked(send_back):
    def make_recall(filler, values, positions):
        n, t = filler.shape
        x = filler.clone()
        x[torch.arange(n, device=x.device), positions] = values
        after = torch.arange(t, device=x.device) > positions[:, None]
        y = torch.full((n, t), IGNORE, device=x.device)
        y[after] = values[:, None].expand(n, t)[after]  # a boolean mask: meta cannot
        return (x, y.cpu()) if send_back else (x, y)
    return make_recall


case("recall_loop_cpu_y", check_make_recall,
     _recall_loop(lambda size, like: torch.full(size, IGNORE)), DEVICE)
case("recall_mask_cpu_y", check_make_recall, _recall_masked(True), DEVICE)
RIGHT["recall_loop_right"] = (check_make_recall, _recall_loop(
    lambda size, like: torch.full(size, IGNORE, device=like.device)))
RIGHT["recall_mask_right"] = (check_make_recall, _recall_masked(False))


# ---- 01, Exercise 2: masked attention written with a boolean index

def _attention(zeros):
    def attention(q, k, v, mask=None):
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if mask is not None:
            scores[~mask.expand_as(scores)] = float("-inf")  # a boolean mask: meta cannot
        weights = scores.softmax(dim=-1)
        if mask is not None:
            empty = ~mask.any(dim=-1, keepdim=True)
            weights = torch.where(empty, zeros(weights), weights)
        return weights @ v
    return attention


case("attention_cpu_zeros", check_attention,
     _attention(lambda w: torch.zeros(w.shape, dtype=w.dtype)), DEVICE)
RIGHT["attention_right"] = (check_attention, _attention(torch.zeros_like))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
