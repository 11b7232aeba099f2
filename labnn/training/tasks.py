r"""The notebooks' task loops: program tracking (notebooks 03, 05) and delayed recall
(notebook 05, `benchmarks/recall_sweep.py`).

Each step is the trainer's own step, `labnn.training.optim.update`: backpropagate, clip
the gradient norm, step AdamW (no weight decay here). What differs from
`labnn.training.trainer.Trainer` is only what a step reads (a batch of programs or of
recall examples), which positions the loss counts, and the learning-rate schedule,
`warmup_cosine`, with which the notebooks' figures and claims were measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from labnn.data.batching import check_in_vocab
from labnn.data.programs import ProgramData, printed_accuracy
from labnn.data.recall import IGNORE
from labnn.nn.arguments import check_int, check_number
from labnn.nn.layers import evaluating, in_mode, past_the_door
from labnn.training.optim import Diverged, check_weight_dtype, update
from labnn.training import timing
from labnn.training.progress import progress

# how a loop gets `[B, T, V]` logits from a model and `x`: `model(x)[0]` by default
LogitsFn = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]
# steps between two reads of the loops' divergence flags (and after the last step)
CHECK_EVERY = 100


def check_steps(finite: torch.Tensor, i: int, lr: float) -> None:
    """After step `i`, every `CHECK_EVERY` steps and after the last: raise `Diverged` if a
    step so far had a NaN or infinite loss or gradient norm (`finite [n]`, one flag per
    step, on the device: one read back to the host here, none per step).

    Raises:
        Diverged: naming the first such step; the steps after it were taken, so the
            model's weights are NaN now.
    """
    n = finite.numel()
    if (i + 1) % CHECK_EVERY and i + 1 < n or finite[: i + 1].all():
        return
    first = int(finite[: i + 1].int().argmin())
    raise Diverged(f"the loss or the gradient norm was NaN or infinite at step {first} of "
                   f"{n}: training diverged, and the model's weights are NaN now (build it "
                   f"again); try a lower lr (now {lr:g})")


def default_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The logits of `logits, state = model(x)`, as every labnn model returns them."""
    return model(x)[0]


def checked_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """`default_logits` past the model's door (`past_the_door`), for ids that the loop
    checked where they entered (`check_inputs`): no read back to the host per step."""
    return past_the_door(model)(x)[0]


def check_inputs(model: torch.nn.Module, xs: list, name: str) -> LogitsFn:
    """How a loop gets the logits of `model` from the inputs `xs`: `checked_logits` once
    their ids are checked here (`check_in_vocab`, one read for all of them), or
    `default_logits`, whose door checks each batch, for inputs of several devices or not
    tensors (the model's door names what is wrong with them), or a model with no
    `config.vocab_size` (whatever inputs it takes)."""
    vocab = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab is None or not xs or not all(isinstance(x, torch.Tensor)
                                          and x.device == xs[0].device for x in xs):
        return default_logits
    check_in_vocab(torch.cat([x.flatten() for x in xs]), vocab, name)
    return checked_logits


def program_loss(logits: torch.Tensor, y: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    r"""The mean cross-entropy of the positions of `mask` (the printed values),
    $\mathcal{L} = -\frac{1}{|M|} \sum_{(b, t) \in M} \log p(y_{bt})$: the other
    targets are `IGNORE`, so no boolean index (`logits[mask]`, whose size depends on the
    data: a wait for the device per step on a GPU) picks them.

    Shape:
        logits `[B, T, V]`; y, mask `[B, T]`.
    """
    return F.cross_entropy(logits.flatten(0, 1), y.masked_fill(~mask, IGNORE).flatten(),
                           ignore_index=IGNORE)


def warmup_cosine(i: int, n: int, lr: float, warmup: int) -> float:
    r"""Learning rate of step `i` of `n`: a linear warm-up over the first `warmup` steps
    times a cosine decay to 0 over all of them,

    $$\eta_i = \eta \cdot \min\!\Big(1, \frac{i + 1}{w}\Big) \cdot
    \tfrac12\Big(1 + \cos\frac{\pi \min(i, n)}{n}\Big).$$

    Not `TrainConfig.lr_at` (which decays only after the warm-up, to `min_lr`).
    """
    check_int("i", i, low=0)  # a step before the first would get a negative rate
    check_int("n", n)
    check_int("warmup", warmup)
    return lr * min(1.0, (i + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(i, n) / n))


def program_lr(i: int, iters: int, lr: float) -> float:
    """`warmup_cosine` with a warm-up of a tenth of the steps (at least one), as
    `train_on_programs` uses it."""
    return warmup_cosine(i, iters, lr, max(1, iters // 10))


def train_on_programs(
    model: torch.nn.Module,
    train: ProgramData,
    test: ProgramData,
    *,
    iters: int,
    batch_size: int = 64,
    lr: float = 2e-3,
    seed: int = 0,
    logits_fn: LogitsFn | None = None,
    eval_programs: int = 1024,
    desc: str | None = None,
) -> dict[str, float]:
    """Train `model` to predict the printed values, then score both sets.

    The loss is the cross-entropy of the printed values only (`mask`); every other token
    is context. Each step is `update` (clipping at 1) at the rate of `program_lr`, in
    training mode; every module's own mode is back afterwards.

    Args:
        model: any labnn LM; called as `logits_fn(model, x)` (default `model(x)[0]`).
        train, test: from `labnn.data.programs.program_task`.
        iters: optimisation steps.
        batch_size: programs per step.
        lr: peak learning rate.
        seed: batch order.
        logits_fn: how to get `[B, T, V]` logits from `model` and `x`.
        eval_programs: score at most this many programs of each set.
        desc: progress-bar label (default: the model's class name).

    Returns:
        `{"train_acc", "test_acc", "seconds", "final_loss"}`; `seconds` is the training
        time (`labnn.training.timing.clock`: CPU time on one CPU thread, else wall time).
    """
    for name, value in (("iters", iters), ("batch_size", batch_size),
                        ("eval_programs", eval_programs)):
        check_int(name, value)
    check_number("lr", lr)
    check_weight_dtype(model)
    if not train.mask.any():
        raise ValueError("train has no printed values: there is nothing to learn (every "
                         "program prints nothing)")
    logits_fn = logits_fn or check_inputs(model, [train.x], "train.x")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    clock = timing.clock(device)  # CPU time on one CPU thread: other jobs do not count
    g, start = torch.Generator().manual_seed(seed), clock()
    printed = train.mask.any(1).cpu()  # read on the host at each step, not on the device
    finite = torch.ones(iters, dtype=torch.bool, device=device)  # read by check_steps
    with in_mode(model, training=True):  # the caller's modes back afterwards
        for i in progress(range(iters), desc=desc or type(model).__name__):
            rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
            while not printed[rows].any():  # no printed value: mean loss is 0 / 0
                rows = torch.randint(0, train.x.size(0), (batch_size,), generator=g)
            x, y, mask = (t[rows].to(device) for t in (train.x, train.y, train.mask))
            loss = program_loss(logits_fn(model, x), y, mask)
            update(model, opt, loss, lr=program_lr(i, iters, lr), grad_clip=1.0,
                   finite=finite[i])
            check_steps(finite, i, lr)
    seconds = clock() - start
    scores = {
        f"{name}_acc": evaluate_programs(model, d, logits_fn, max_programs=eval_programs)
        for name, d in (("train", train), ("test", test))
    }
    return {**scores, "seconds": seconds, "final_loss": loss.item()}


@torch.no_grad()
def evaluate_programs(
    model: torch.nn.Module,
    data: ProgramData,
    logits_fn: LogitsFn | None = None,
    batch_size: int = 256,
    max_programs: int = 1024,
) -> float:
    """`printed_accuracy` of `model` over the first `max_programs` programs of `data`,
    in eval mode.

    Batches without a printed value are skipped (they have nothing to score).
    """
    check_int("batch_size", batch_size)
    check_int("max_programs", max_programs)
    logits_fn = logits_fn or default_logits
    device, n = next(model.parameters()).device, min(max_programs, data.x.size(0))
    if not data.mask[:n].any():
        raise ValueError(f"data has no printed values to score in its first {n} programs")
    hits = total = 0
    with evaluating(model):
        for i in range(0, n, batch_size):
            part = ProgramData(*(t[i : i + batch_size] for t in (data.x, data.y, data.mask)))
            k = int(part.mask.sum())
            if k:
                logits = logits_fn(model, part.x.to(device)).cpu()
                # a count again (the fraction times k is within rounding of it)
                hits, total = hits + round(printed_accuracy(logits, part) * k), total + k
    return hits / total


def train_recall(
    model: torch.nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    *,
    lr: float = 1e-3,
    warmup: float = 0.1,
    clip: float = 1.0,
    logits_fn: LogitsFn | None = None,
    record_every: int = 0,
) -> dict:
    r"""Train `model` on `batches`, one `update` each; the loss skips `IGNORE` labels.

    The learning rate is `warmup_cosine` with a warm-up of
    $w = \lfloor \text{warmup} \cdot n \rfloor + 1$ of the $n$ steps. Any batches of
    `(x, y)` with next-token labels work (e.g. text, with no `IGNORE`). The steps run in
    training mode; every module's own mode is back afterwards.

    Args:
        model: any labnn LM; called as `logits_fn(model, x)` (default `model(x)[0]`).
        batches: the `(x, y)` pairs, in order (`labnn.data.recall.recall_batches`).
        lr: peak learning rate.
        warmup: fraction of the steps spent warming up, in `[0, 1]`.
        clip: gradients are clipped to this total norm.
        logits_fn: how to get `[B, T, V]` logits from `model` and `x`.
        record_every: every this many steps, record `model.layer_weights()` (the
            Feedback layer mix); 0 = never.

    Returns:
        `{"seconds_per_step", "losses", "mix"}`: the mean time of a step (`timing.clock`), every
        step's loss, and `(step, weights)` pairs.
    """
    if not batches:
        raise ValueError("batches is empty: there is nothing to train on")
    check_number("lr", lr)  # True is not a rate of 1
    check_number("warmup", warmup, high=1, expected="a fraction in [0, 1]")
    check_number("clip", clip, expected="a finite number >= 0 (0: no clipping)")
    check_int("record_every", record_every, low=0)
    check_weight_dtype(model)
    logits_fn = logits_fn or check_inputs(model, [x for x, _ in batches], "batches' x")
    device = next(model.parameters()).device
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    n = len(batches)
    w = int(warmup * n) + 1
    mix, losses = [], []
    finite = torch.ones(n, dtype=torch.bool, device=device)  # read by check_steps
    clock = timing.clock(device)  # CPU time on one CPU thread: other jobs do not count
    start = clock()
    with in_mode(model, training=True):  # the caller's modes back afterwards
        for i, (x, y) in enumerate(batches):
            logits = logits_fn(model, x.to(device))
            loss = F.cross_entropy(logits.flatten(0, 1), y.to(device).flatten(),
                                   ignore_index=IGNORE)
            update(model, opt, loss, lr=warmup_cosine(i, n, lr, w), grad_clip=clip,
                   finite=finite[i])
            losses.append(loss.detach())  # on the device: read once, after the loop
            if record_every and hasattr(model, "layer_weights") and i % record_every == 0:
                mix.append((i, model.layer_weights().detach()))
            check_steps(finite, i, lr)
    seconds = (clock() - start) / n
    mix = [(i, weights.cpu()) for i, weights in mix]
    return {"seconds_per_step": seconds, "losses": torch.stack(losses).tolist(), "mix": mix}
