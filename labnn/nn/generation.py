"""Sampling: the next token from a language model's logits, and the one generation loop
of every model.

Dimension letters (the package legend): `B` batch, `T` tokens, `T0` those of a prompt,
`V` vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from labnn.nn.arguments import check_generator, check_sampling, check_tokens

OnToken = Callable[[torch.Tensor], object]  # `generate`'s `on_token`: each new token `[B]`


def sample_next(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    r"""Draw one token per row from $\mathrm{softmax}(\ell / \tau)$, restricted to the
    `top_k` largest logits.

    Args:
        logits: next-token logits. A row with NaN or +inf (a diverged model), or all
            -inf (every token ruled out), has no distribution to draw from: its token is
            arbitrary. Unchecked here, where a check would read the values back to the
            host at every token; `generate` checks once, after its loop.
        temperature: $\tau$; 0 picks the most likely token (greedy), as does a
            $\tau$ below the smallest normal number of the type the draw computes in
            (the logits', at least float32: 1.2e-38 for float16 and bfloat16 logits
            too), its limit where $\ell / \tau$ would divide 0 by 0.
        top_k: keep only this many candidates, and any tied with the k-th (None, or a
            `top_k >= V`, keeps all).
        generator: random stream for the draw, on the logits' device.

    Shape:
        logits `[B, V]` -> tokens `[B]`.

    Returns:
        One token id per row, on the logits' device.
    """
    check_sampling(temperature, top_k)
    if not isinstance(logits, torch.Tensor) or logits.dim() != 2 or logits.size(1) == 0:
        got = type(logits).__name__
        if isinstance(logits, torch.Tensor):
            got = list(logits.shape)
        raise ValueError(f"logits must be a [B, V] tensor with V >= 1, got {got}")
    if not logits.is_floating_point():  # a mask or ids passed by mistake
        raise TypeError(f"logits must be a floating tensor (the model's scores), got "
                        f"{logits.dtype}")
    check_generator(generator, logits.device, "the logits are")  # no host sync: a device compare
    dtype = torch.promote_types(logits.dtype, torch.float32)
    # a temperature that rounds to 0 in `dtype` (1e-300 in float32) would divide the
    # largest logit 0 by 0: below the smallest normal number, its limit, greedy
    if temperature < torch.finfo(dtype).tiny:
        return logits.argmax(dim=-1)
    # In float32 at least and shifted so that the largest is 0 (the softmax is
    # unchanged): `logits / temperature` can then not overflow to inf, whose softmax is
    # NaN (float16 logits of 100 at temperature 1e-3; any logits at 1e-40).
    logits = logits.to(dtype)
    logits = (logits - logits.amax(dim=-1, keepdim=True)) / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = logits.float().softmax(dim=-1)
    # The first of V exponential clocks, clock v running at rate p_v, is token v with
    # probability p_v. This is `torch.multinomial(probs, 1)`'s own draw, the same token
    # from the same generator, without the check it reads back to the host first (two
    # waits for a GPU at every token).
    clocks = torch.empty_like(probs).exponential_(generator=generator)
    return (probs / clocks).argmax(dim=-1)


def generate(
    next_logits,
    prompt: torch.Tensor,
    n: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    on_token: OnToken | None = None,
) -> torch.Tensor:
    r"""Append `n` sampled tokens to `prompt`: the loop behind every model's `generate`.

    Each model differs only in how it gets the next-token logits, which it passes as
    `next_logits(new, seen, cache) -> (logits, cache)`. `seen` `[B, T]` is every token so
    far, `new` the ones the model has not read yet (the whole prompt first, then the last
    sampled token), `cache` what the previous call returned (None the first time). A
    model with a cache reads only `new`; one without re-reads `seen`.

    `on_token(tokens)`, when given, receives each new column `[B]` as it is drawn,
    before the next (to show text as it comes). Reading it on the host waits for the
    device at every token; without it the loop reads one value back, after its last
    token: whether every token's logits could be drawn from (`check_drawable`).

    The arguments are checked here, once (the models check the prompt's ids): the
    sampling parameters, `on_token`, the prompt's type and shape, and a `generator` of
    the prompt's device.

    Shape:
        prompt `[B, T0]` -> `[B, T0 + n]`; logits `[B, V]`; `on_token`'s tokens `[B]`.
    """
    check_sampling(temperature, top_k, n)
    check_tokens(prompt, 0, "prompt", scan=False)  # no vocabulary here: type and shape
    check_generator(generator, prompt.device)  # the model's: each model checks the prompt's
    if on_token is not None and not callable(on_token):
        raise TypeError(f"on_token must be a callable or None, got "
                        f"{type(on_token).__name__}")
    b, t0 = prompt.shape
    out = prompt.new_empty(b, t0 + n)
    out[:, :t0] = prompt
    drawable = torch.empty(b, n, dtype=torch.bool, device=prompt.device)
    new, cache = prompt, None
    for i in range(t0, t0 + n):
        logits, cache = next_logits(new, out[:, :i], cache)
        drawable[:, i - t0] = logits.amax(dim=-1).isfinite()  # no NaN, +inf, all -inf
        token = sample_next(logits, temperature, top_k, generator)
        out[:, i] = token
        if on_token is not None:
            on_token(token)
        new = out[:, i : i + 1]
    check_drawable(drawable, t0)
    return out


def check_drawable(drawable: torch.Tensor, t0: int) -> None:
    """Raise a clear error where the logits of a generated token had no distribution to
    draw from (`drawable [B, n]` False): one read, after the loop."""
    if drawable.numel() and not drawable.all():
        row, col = (~drawable).nonzero()[0].tolist()
        raise RuntimeError(
            f"the model's logits were NaN, +inf or all -inf at row {row}, token {t0 + col} "
            "(and maybe later): that token is arbitrary, and every later one follows from it "
            "(a model whose weights diverged?)")
