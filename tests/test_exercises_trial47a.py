"""Trial 47a: a blind learner trial of notebook 02's five exercises (257 answers, and a rerun
of trial 45a's 304).

Wrong answers that passed: an empty memory written with the check's own sizes
(`h.new_zeros(2, 0, 8)`: every mem_len = 0 call had B = 2, D = 8), and a float32 step in a
float64 memory (a copy compared to 1e-5); a segment mask from bfloat16 or float16 positions
(the longest text was 130), a memory cut two segments back or a window capped at 12 to 64
keys (no case had a long memory), a mask cached by n alone (every call had a new n), None
past n = 200, and a hack for seg_len = 1 (never tried); a shift with indices in int8,
uint8, bfloat16 or float16, or in x's own dtype (S <= 9, float x only), one limited to four
dimensions, one by `as_strided` that ignores x's storage offset, and a float32 step in a
float64 shift or in the scores (compared to float32's precision, 1e-4 even in float64, so
that a result times 1 + 1e-4 passed too); distances from int16 positions (m <= 2100;
still accepted, xfail: trial 45a lists them as right).
Messages: a scale rounded to an integer (`math.isqrt(8)` = 2 = sqrt(T)) was told it divided
by sqrt(q.size(-2)); a memory slice one place late was told it drops T old states; uint8
positions were told about a negative slice start; `q += u * 0` about `.transpose_`; scores
wrong only at B = 1 about `.squeeze()`."""
import math

from checker_helpers import trial_case, trial_tests

import torch
import torch.nn.functional as F

from labnn.exercises.transformer_xl import (check_relative_distances, check_relative_scores,
                                            check_relative_shift, check_segment_mask,
                                            check_update_memory)
from labnn.xl import relative_shift

CASES, RIGHT, XFAIL = {}, {}, {}
case = trial_case(CASES, XFAIL)


# ---- Exercise 1: update_memory ----
def _keep(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], 1)
    return x[:, x.size(1) - min(mem_len, x.size(1)):].detach()


def _empty(make):
    """update_memory whose mem_len = 0 memory is `make(h)`."""
    def update_memory(mem, h, mem_len):
        if mem_len == 0:
            return make(h)
        x = h if mem is None else torch.cat([mem, h], 1)
        return x[:, -mem_len:].detach()
    return update_memory


def um_f32_step(mem, h, mem_len):
    return _keep(mem, h, mem_len).float().to(h.dtype)


def um_start_plus1(mem, h, mem_len):
    x = h if mem is None else torch.cat([mem, h], 1)
    start = max(0, x.size(1) - mem_len)
    return x[:, start + 1:].detach() if mem_len else x[:, :0].detach()


EMPTY = r"mem_len = 0.*\[3, 0, 6\].*h\[:, :0\]"
case("um_literal_2_0_8", check_update_memory, _empty(lambda h: h.new_zeros(2, 0, 8)), EMPTY)
case("um_D8_hardcoded", check_update_memory,
     _empty(lambda h: h.new_zeros(h.size(0), 0, 8)), EMPTY)
case("um_B2_hardcoded", check_update_memory,
     _empty(lambda h: h.new_zeros(2, 0, h.size(2))), EMPTY)
case("um_f32_step", check_update_memory, um_f32_step, r"float64.*float32 step")
case("um_start_plus1", check_update_memory, um_start_plus1,
     r"^(?!.*drop T = ).*one too few.*max\(0, x\.size\(1\) - mem_len\)")
RIGHT["um_keep"] = (check_update_memory, _keep)
RIGHT["um_new_zeros"] = (check_update_memory,
                         _empty(lambda h: h.new_zeros(h.size(0), 0, h.size(2))))
RIGHT["um_zeros_like_h"] = (check_update_memory, _empty(lambda h: torch.zeros(
    h.size(0), 0, h.size(2), dtype=h.dtype, device=h.device)))


# ---- Exercise 2: segment_mask ----
def _mask(n, seg_len, mem_len, dtype=torch.int64):
    i = torch.arange(n, dtype=dtype)[:, None]
    j = torch.arange(n, dtype=dtype)[None]
    return (j <= i) & (j >= torch.div(i, seg_len, rounding_mode="floor") * seg_len - mem_len)


def _mask_in(dtype):
    return lambda n, seg_len, mem_len: _mask(n, seg_len, mem_len, dtype)


def _capped(w):
    def segment_mask(n, seg_len, mem_len):
        i, j = torch.arange(n)[:, None], torch.arange(n)[None]
        return _mask(n, seg_len, mem_len) & (i - j < w)
    return segment_mask


def sm_two_back(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    return _mask(n, seg_len, mem_len) & (j // seg_len >= i // seg_len - 2)


_MEMO = {}


def sm_memo_by_n(n, seg_len, mem_len):
    if n not in _MEMO:
        _MEMO[n] = _mask(n, seg_len, mem_len)
    return _MEMO[n]


def sm_none_past_200(n, seg_len, mem_len):
    return _mask(n, seg_len, mem_len) if n <= 200 else None


def sm_seglen1_hack(n, seg_len, mem_len):
    i, j = torch.arange(n)[:, None], torch.arange(n)[None]
    return _mask(n, seg_len, mem_len) & ((j > i - n + 1) if seg_len == 1 else True)


def sm_uint8(n, seg_len, mem_len):
    i = torch.arange(n, dtype=torch.uint8)[:, None]
    j = torch.arange(n, dtype=torch.uint8)[None]
    return (j <= i) & (j >= (i // seg_len) * seg_len - mem_len)


def sm_loop(n, seg_len, mem_len):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for s in range(0, n, seg_len):
        e = min(s + seg_len, n)
        mask[s:e, max(0, s - mem_len):e] = True
    return mask.tril()


SMALL = r"small dtype.*(bfloat16|float16).*torch\.arange\(n\)"
case("sm_bf16", check_segment_mask, _mask_in(torch.bfloat16), SMALL)
case("sm_fp16", check_segment_mask, _mask_in(torch.float16), SMALL)
case("sm_two_segments_back", check_segment_mask, sm_two_back,
     r"segment_mask\(4, 1, 3\).*differs at \[i=3, j=0\].*start\(i\) - mem_len")
case("sm_memo_by_n", check_segment_mask, sm_memo_by_n, r"kept between calls.*some of the arguments")
for w in (12, 16, 24, 32, 64, 1000):
    case(f"sm_cap{w}", check_segment_mask, _capped(w), rf"window of {w} keys \(i - j < {w}\)")
case("sm_none_past_200", check_segment_mask, sm_none_past_200, r"2050.*NoneType")
case("sm_seglen1_hack", check_segment_mask, sm_seglen1_hack,
     r"segment_mask\(4, 1, 3\).*differs at \[i=3, j=0\]")
case("sm_uint8", check_segment_mask, sm_uint8, r"^(?!.*slice).*uint8.*wraps")
RIGHT["sm_int64"] = (check_segment_mask, _mask_in(torch.int64))
RIGHT["sm_float32_positions"] = (check_segment_mask, _mask_in(torch.float32))
RIGHT["sm_loop"] = (check_segment_mask, sm_loop)


# ---- Exercise 3: relative_distances ----
def rd_int16(t, m):
    i, j = torch.arange(t, dtype=torch.int16), torch.arange(m + t, dtype=torch.int16)
    return ((m + i)[:, None] - j[None]).long()


case("rd_int16", check_relative_distances, rd_int16, r"40000.*int16",
     xfail="trial 45a lists int16 positions as right (rd_right_int16); m = 2100 is tried")
RIGHT["rd_int64"] = (check_relative_distances,
                     lambda t, m: (m + torch.arange(t))[:, None] - torch.arange(m + t)[None])


# ---- Exercise 4: relative_shift ----
def _pad_shift(x):
    *lead, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(*lead, s + 1, t)[..., 1:, :].reshape(*lead, t, s)


def _index_in(dtype):
    """A gather whose indices are computed in `dtype` (None: x's own dtype)."""
    def relative_shift(x):
        t, s = x.shape[-2:]
        kind = dtype or x.dtype
        i = torch.arange(t, dtype=kind, device=x.device)[:, None]
        j = torch.arange(s, dtype=kind, device=x.device)[None]
        col = (j + (t - 1) - i).long().clamp(0, s - 1)
        return x.gather(-1, col.expand(x.shape))
    return relative_shift


def rs_upto_4d(x):
    shape = x.shape
    while x.dim() < 4:
        x = x.unsqueeze(0)
    b, h, t, s = x.shape
    return F.pad(x, (1, 0)).reshape(b, h, s + 1, t)[:, :, 1:].reshape(shape)


def rs_f32_step(x):
    return _pad_shift(x.float()).to(x.dtype)


def rs_as_strided_no_offset(x):
    t, s = x.shape[-2:]
    x = x.contiguous()
    return x.as_strided(x.shape, (*x.stride()[:-2], s - 1, 1), t - 1)


for dtype in (torch.int8, torch.uint8, torch.bfloat16, torch.float16):
    case(f"rs_index_{str(dtype)[6:]}", check_relative_shift, _index_in(dtype),
         r"2100.*small dtype.*int64")
case("rs_index_in_x_dtype", check_relative_shift, _index_in(None),
     r"bfloat16.*x's dtype.*int64")
case("rs_upto_4d", check_relative_shift, rs_upto_4d, r"any leading dimensions.*\[2, 2, 3, 4, 9\]")
case("rs_f32_step", check_relative_shift, rs_f32_step, r"float64.*float32 step")
case("rs_as_strided_no_lead_offset", check_relative_shift, rs_as_strided_no_offset,
     r"storage_offset\(\)")
RIGHT["rs_pad"] = (check_relative_shift, _pad_shift)
RIGHT["rs_gather_int64"] = (check_relative_shift, _index_in(torch.int64))
RIGHT["rs_gather_int16"] = (check_relative_shift, _index_in(torch.int16))


# ---- Exercise 5: relative_scores ----
def _scores(q, k, r, u, v, scale=None):
    ac = torch.einsum("bhtd,bhsd->bhts", q + u[:, None], k)
    bd = torch.einsum("bhtd,shd->bhts", q + v[:, None], r)
    return (ac + relative_shift(bd)) / (scale or math.sqrt(q.size(-1)))


def sc_f32_step(q, k, r, u, v):
    return _scores(*(t.float() for t in (q, k, r, u, v))).to(q.dtype)


def sc_f32_sum(q, k, r, u, v):
    return _scores(q, k, r, u, v).float().to(q.dtype)


def sc_q_iadd_zero(q, k, r, u, v):
    q += u[:, None] * 0
    return _scores(q, k, r, u, v)


def sc_b1_hardcoded(q, k, r, u, v):
    return _scores(q, k, r, u, v, None if q.size(0) > 1 else math.sqrt(8))


def sc_matmul(q, k, r, u, v):
    ac = (q + u[:, None]) @ k.transpose(-2, -1)
    bd = (q + v[:, None]) @ r.permute(1, 2, 0)
    return (ac + _pad_shift(bd)) / q.size(-1) ** 0.5


FLOAT32 = r"float64.*(float32 step|off by)"
case("sc_f32_step", check_relative_scores, sc_f32_step, FLOAT32)
case("sc_f32_sum", check_relative_scores, sc_f32_sum, FLOAT32)
case("sc_times_1_plus_1e-4", check_relative_scores,
     lambda q, k, r, u, v: _scores(q, k, r, u, v) * (1 + 1e-4), r"float64.*off by")
case("sc_plus_1e-5", check_relative_scores, lambda q, k, r, u, v: _scores(q, k, r, u, v) + 1e-5,
     r"float64.*off by")
ROUNDED = r"^(?!.*q\.size\(-2\)).*round.*integer.*math\.sqrt\(q\.size\(-1\)\)"
case("sc_isqrt", check_relative_scores,
     lambda q, k, r, u, v: _scores(q, k, r, u, v, math.isqrt(q.size(-1))), ROUNDED)
case("sc_int_sqrt", check_relative_scores,
     lambda q, k, r, u, v: _scores(q, k, r, u, v, int(math.sqrt(q.size(-1)))), ROUNDED)
case("sc_q_iadd_zero", check_relative_scores, sc_q_iadd_zero,
     r"^(?!.*transpose_).*in place.*`q`")
case("sc_b1_hardcoded", check_relative_scores, sc_b1_hardcoded,
     r"^(?!.*squeeze).*B = H = 1.*branch")
RIGHT["sc_einsum"] = (check_relative_scores, _scores)
RIGHT["sc_matmul"] = (check_relative_scores, sc_matmul)
RIGHT["sc_prescaled"] = (check_relative_scores, lambda q, k, r, u, v: _scores(
    q / q.size(-1) ** 0.5, k, r, u / q.size(-1) ** 0.5, v / q.size(-1) ** 0.5, 1.0))
RIGHT["sc_0dim_float32_scale"] = (check_relative_scores, lambda q, k, r, u, v: _scores(
    q, k, r, u, v, torch.tensor(q.size(-1)).sqrt()))

test_wrong_answer_named, test_right_answer_accepted = trial_tests(CASES, RIGHT, XFAIL)
