"""Notebook 02's checkers name the variants of trial 8's slips too (issue 28): a truth test
on `mem` written either way, m hard-coded to the check's own value, an einsum that reads r
in another layout, relative_shift given the transposed product, the segment start from
plain `i`."""

import math

import torch

from checker_helpers import fails_with, passes
from labnn.exercises.transformer_xl.relative_distances import M, T
from labnn.exercises.transformer_xl.relative_scores import (
    check_relative_distances, check_relative_scores)
from labnn.exercises.transformer_xl.segment_memory import check_segment_mask, check_update_memory
from labnn.xl.relative_attention import relative_shift


def test_update_memory_names_if_mem():
    def update(mem, h, mem_len):
        c = torch.cat([mem, h], 1) if mem else h
        return c[:, max(0, c.size(1) - mem_len):].detach()
    fails_with(check_update_memory, update, r"`if mem:`.*`mem is None`")


def test_relative_distances_hard_coded_to_the_checks_own_m(capsys):
    def distances(t, m):
        return torch.arange(t)[:, None] + M - torch.arange(m + t)
    fails_with(check_relative_distances, distances, rf"does not change with m.*m = {M}\?")
    passes(check_relative_distances,
           lambda t, m: torch.arange(t)[:, None] + m - torch.arange(m + t), capsys)


def test_relative_distances_checks_a_second_size():
    def distances(t, m):  # right only for t = T
        return torch.arange(T)[:, None] + m - torch.arange(m + T)
    fails_with(check_relative_distances, distances, r"relative_distances\(3, 7\)")


def test_relative_scores_einsum_reading_r_as_h_d_s():
    def scores(q, k, r, u, v):
        bd = torch.einsum("bhtd,hds->bhts", q + v[:, None], r)
        return ((q + u[:, None]) @ k.mT + relative_shift(bd)) / math.sqrt(q.size(-1))
    fails_with(check_relative_scores, scores, r"reads it as \[H, D_h, S\].*'bhtd,shd->bhts'")


def test_relative_scores_shift_of_the_transposed_product():
    def scores(q, k, r, u, v):
        bd = relative_shift(r.permute(1, 0, 2) @ (q + v[:, None]).mT)  # [B, H, S, T]
        return ((q + u[:, None]) @ k.mT + bd.mT) / math.sqrt(q.size(-1))
    fails_with(check_relative_scores, scores,
               r"given \[2, 3, 9, 4\] = \[B, H, S, T\]: shift the product \(q \+ v\) r\^T")


def test_segment_mask_sliding_window_names_the_segment_start():
    def mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)
        return (j <= i) & (j >= i - mem_len)
    fails_with(check_segment_mask, mask, r"sliding window.*i // seg_len")
