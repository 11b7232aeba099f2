"""Notebook 03's learned weights transformed before use: the layer logits `w` of the memory
vector given to `exp()` before their softmax (in the token loop, where `memory_vector`
names it already), negated (`softmax(-w)`) or given a second softmax (and `xs` reshaped
where a permute was meant); the relative bias table given to `exp()` or a softmax before
its columns are picked. Each is a list of
`(result, message)` pairs for the checkers' `diagnose`.

Dimension letters: `L+1` layers (the embedding first), `B` batch, `D` width, `H` heads.
"""

from __future__ import annotations

from typing import Callable

import torch


def mix_slips(xs: torch.Tensor, w: torch.Tensor) -> list[tuple[torch.Tensor, str]]:
    """`memory_vector(xs, w)` with the weights `softmax(-w)` or `softmax(softmax(w))`, or
    with `xs` regrouped by `reshape(B, L+1, D)` where `permute(1, 0, 2)` was meant."""
    def mix(weights: torch.Tensor, layers: torch.Tensor = xs) -> torch.Tensor:
        return torch.einsum("l,lbd->bd", weights, layers)
    regrouped = xs.reshape(xs.size(1), xs.size(0), -1).transpose(0, 1)
    return [(mix((-w).softmax(0)), "your weights are softmax(-w): the largest logit must get "
                                   "the largest weight, softmax(w) with no minus sign."),
            (mix(w.softmax(0).softmax(0)), "you took the softmax twice (softmax of softmax(w) "
                                           "squeezes the weights toward uniform): once, "
                                           "w.softmax(0)."),
            (mix(w.softmax(0), regrouped), "xs.reshape(B, L+1, D) regroups the numbers in "
             "memory order, it does not move the layer axis: layer l is xs[l]; use "
             "xs.permute(1, 0, 2), or mix along dim 0 as it is, (w.softmax(0)[:, None, "
             "None] * xs).sum(0).")]


def loop_mixes(logits: torch.Tensor, loop: Callable) -> list[tuple[torch.Tensor, str]]:
    """The token loop (`loop(mix)`, `mix(outs)` the memory vector of a step's outputs) with
    the layer logits `model.mix.logits` given to `exp()` before their softmax, negated, or
    cut to the layers after the softmax (the embedding's weight dropped)."""
    def mixed(weights: torch.Tensor) -> Callable:
        return lambda outs: torch.einsum("l,lbd->bd", weights, torch.stack(outs))
    use = "model.mix(torch.stack(outs)) computes the mix for you"
    return [
        (loop(mixed(logits.exp().softmax(0))),
         "your memory vector passes the layer logits through exp() before the softmax "
         f"(softmax already exponentiates): the weights are softmax(model.mix.logits); {use}."),
        (loop(mixed((-logits).softmax(0))),
         f"your memory vector weights the layers by softmax(-model.mix.logits): {use}."),
        (loop(lambda outs: torch.einsum("l,lbd->bd", logits.softmax(0)[1:],
                                        torch.stack(outs[1:]))),
         "your memory vector drops the embedding's weight (softmax(logits)[1:] with the "
         f"layers only): mix ALL the step's outputs, the embedding first; {use}."),
    ]


def table_transformed(table: torch.Tensor, s: int, what: str) -> list[tuple[torch.Tensor, str]]:
    """`relative_bias(table, s)` with `table.exp()`, or a softmax of the table over its
    distances or its heads, before the columns are picked."""
    d = torch.arange(s, 0, -1).clamp(max=table.size(1)) - 1
    said = ("the table holds the biases themselves, added to the scores as they are: pick "
            "its columns, table[:, d.clamp(max=table.size(1)) - 1], and change no entry.")
    return [(table.exp()[:, d], f"{what}: you applied exp() to the table: {said}"),
            (table.softmax(-1)[:, d], f"{what}: you took a softmax of the table over its "
                                      f"distances: {said}"),
            (table.softmax(0)[:, d], f"{what}: you took a softmax of the table over its "
                                     f"heads: {said}")]
