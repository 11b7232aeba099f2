"""Where XL's replayed ring step spends its time: the three matrix-vector products of attention,
and how labnn's own kernels should cut the ring.

At batch 1 every product of a generated token is a matrix-vector product. `labnn.compiled`'s ring
step computes the content and position scores with `relative_scores` (batched matrix products)
and the weighted values with one more; on a GPU cuBLAS runs these over thousands of keys far
below the memory bandwidth (docs/benchmarks.md, "On a GPU"). This experiment times, in one
process, on the same model and the same rings:

* `bmm`: labnn's ring step as it is (`labnn.compiled.ring_steps.ring_attention`);
* `sum`: the same step with the three products written as multiply-and-sum reductions, which
  inductor fuses into one reduction kernel each (the alternative measured, not adopted: it
  writes the scores a second time beside `relative_scores`);
* `sum+tf32`: `sum` with TF32 allowed for matrix products (which matrix-vector kernels ignore).

Each is compiled (`--backend`, inductor by default) and, on CUDA, recorded as a CUDA graph by
`labnn.compiled.decoder`. Then, for each `--tilings` setting (`SLOTSxPROGRAMS`, a
`labnn.compiled.kernels.Tiling`: runs of `slots` ring slots, about `programs` programs per
layer):

* `kernels SxP`: labnn's Triton kernels for the whole step (`backend="kernels"`) with that
  tiling, recorded as a CUDA graph (the sweep behind `TILING`, docs/benchmarks.md; on a CPU
  only under Triton's interpreter, `TRITON_INTERPRET=1`, as the tests run it).

A row prints ms per token, the ratio to `bmm`'s and the largest logit difference to `bmm`
as soon as it is measured.

    python benchmarks/bench_xl_ring_kernels.py --device cuda --attn-lens 3800 800
    python benchmarks/bench_xl_ring_kernels.py --device cuda --variants kernels  # the sweep
    python benchmarks/bench_xl_ring_kernels.py --variants bmm --profile 50   # where it goes
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import time

import torch

import labnn.compiled.ring_steps as steps
from labnn import compiled
from labnn.compiled.cuda_graph import record
from labnn.compiled.decoding import embed_one
from labnn.training import timing
from labnn.training.trainer import pick_device
from labnn.xl import TransformerXL, XLConfig

LABNN_STEP = steps.ring_attention


def ring_attention_sum(attn, x, keys_t, values, slot, column, written, table):
    """`ring_attention` with its three products as multiply-and-sum reductions."""
    q, (k, v) = attn.project(x[:, None])
    keys_t.index_copy_(3, slot.view(1), k.transpose(2, 3).to(keys_t.dtype))
    values.index_copy_(2, slot.view(1), v.to(values.dtype))
    q = q[:, :, 0]  # [B, H, D_h]
    if table is None:
        s = (q.unsqueeze(-1) * keys_t).sum(-2)
    else:
        s = ((q + attn.content_bias).unsqueeze(-1) * keys_t).sum(-2)
        s = s + ((q + attn.position_bias).unsqueeze(-1) * table[:, :, column]).sum(-2)
    s = (s / math.sqrt(q.size(-1))).masked_fill(~written, float("-inf"))
    y = (s.softmax(-1).unsqueeze(-1) * values).sum(-2)  # [B, H, D_h]
    return attn.out_proj(y.flatten(1)), (keys_t, values)


VARIANTS = {"bmm": (LABNN_STEP, False), "sum": (ring_attention_sum, False),
            "sum+tf32": (ring_attention_sum, True)}


@contextlib.contextmanager
def variant(name: str):
    """Run the ring step with `name`'s attention and TF32 setting, then restore both."""
    fn, tf32 = VARIANTS[name]
    before = torch.backends.cuda.matmul.allow_tf32
    steps.ring_attention, torch.backends.cuda.matmul.allow_tf32 = fn, tf32
    try:
        yield
    finally:
        steps.ring_attention, torch.backends.cuda.matmul.allow_tf32 = LABNN_STEP, before


def ms_per_token(decode, token, device, n: int) -> float:
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        decode(token)
    sync()
    start = time.perf_counter()
    for _ in range(n):
        decode(token)
    sync()
    return (time.perf_counter() - start) / n * 1e3


def profile(decode, token, device, n: int) -> str:
    """torch.profiler's table of `n` tokens through `decode`: the operations (on a GPU, the
    kernels) that take the time, with the kernels launched per token."""
    cuda = device.type == "cuda"
    activities = [torch.profiler.ProfilerActivity.CPU]
    activities += [torch.profiler.ProfilerActivity.CUDA] if cuda else []
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(n):
            decode(token)
        if cuda:
            torch.cuda.synchronize()
    events = prof.key_averages()
    kernels = sum(e.count for e in events if getattr(e, "device_type", None)
                  == torch.autograd.DeviceType.CUDA) / n
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    head = f"  profile of {n} tokens" + (f": {kernels:.0f} kernels per token" if cuda else "")
    return head + "\n" + events.table(sort_by=sort, row_limit=10)


TILINGS = ["64x256", "32x512", "64x1024", "128x256", "128x1024", "32x2048", "16x2048"]


def tiling_setting(text: str) -> str:
    """`--tilings` entries: "SLOTSxPROGRAMS", each a `Tiling` the kernels can run."""
    from labnn.compiled.kernels import Tiling

    try:
        Tiling(*map(int, text.split("x", 1)))
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}; e.g. 16x2048") from None
    return text


def kernel_decoder(model, ring, token, tiling: str):
    """`token -> logits` through labnn's kernels cut by `tiling` ("16x2048"), recorded as
    a CUDA graph on a GPU (as `compiled.decoder(..., backend="kernels")` does with the
    default tiling)."""
    from labnn.compiled import kernels

    slots, programs = map(int, tiling.split("x"))
    step = functools.partial(kernels.xl_kernel_step,
                             tiling=kernels.Tiling(slots=slots, programs=programs))

    def run(token, ring):
        return step(model, embed_one(model, token), ring)

    if token.device.type == "cuda":
        return record(run, token, ring)
    return lambda token: run(token, ring)


def decoders(model, cache, length: int, token, a):
    """Each variant asked for, by name, with `decode(token) -> logits` made on a ring of
    its own (the attention variants compile here)."""
    for name in a.variants:
        if name != "kernels":
            with variant(name):
                torch.compiler.reset()
                ring = compiled.xl_ring(cache, length - 1)
                yield name, compiled.decoder(model, ring, token, backend=a.backend)
            continue
        for tiling in a.tilings:
            ring = compiled.xl_ring(cache, length - 1)
            yield f"kernels {tiling}", kernel_decoder(model, ring, token, tiling)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--attn-lens", type=int, nargs="+", default=[3800, 800])
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--n-layers", type=int, default=12)
    p.add_argument("--tokens", type=int, default=200, help="timed tokens per row")
    p.add_argument("--backend", default="inductor", choices=["eager", "inductor"])
    p.add_argument("--variants", nargs="+", choices=[*VARIANTS, "kernels"],
                   default=[*VARIANTS, "kernels"],
                   help="bmm is always first: the others' ratios and differences are to it")
    p.add_argument("--tilings", nargs="+", default=TILINGS, type=tiling_setting,
                   help="the kernels' SLOTSxPROGRAMS settings to time (Tiling)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after each row, torch.profiler's table over N more tokens")
    p.add_argument("--quick", action="store_true", help="a tiny model, eager backend (CI)")
    p.add_argument("--json", action="store_true", help="end with one JSON line of the rows")
    a = p.parse_args()
    try:
        device = pick_device(a.device)
    except ValueError as err:  # one line, as argparse says any other mistake
        p.error(f"--device {a.device}: {err}")
    print(f"{device}: {timing.machine(device)}", flush=True)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if device.type != "cuda" and not interpreted and "kernels" in a.variants:
        a.variants.remove("kernels")  # they run on CUDA, or under Triton's interpreter
        print("kernels: left out, they need CUDA or TRITON_INTERPRET=1", flush=True)
    a.variants = ["bmm", *[v for v in a.variants if v != "bmm"]]
    if a.quick:
        a.attn_lens, a.d_model, a.n_heads, a.n_layers = [64], 32, 4, 2
        a.tokens, a.backend, a.tilings = 5, "eager", ["16x2048", "32x1"]
    rows = []
    torch.manual_seed(0)
    for length in a.attn_lens:
        config = XLConfig(65, a.d_model, a.n_heads, a.n_layers, mem_len=length - 1)
        model = TransformerXL(config).to(device).eval()
        token = torch.zeros(1, 1, dtype=torch.long, device=device)
        with torch.inference_mode():
            _, cache = model.step(torch.randint(65, (1, length - 1), device=device))
            first, bmm_ms = None, None
            for name, decode in decoders(model, cache, length, token, a):
                logits = decode(token).clone()
                diff = 0.0 if first is None else (logits - first).abs().max().item()
                first = logits if first is None else first
                ms = ms_per_token(decode, token, device, a.tokens)
                bmm_ms = ms if bmm_ms is None else bmm_ms
                rows.append({"attn_len": length, "variant": name, "ms": ms,
                             "x_bmm": ms / bmm_ms, "max_diff": diff})
                print(f"attention length {length:5d}  {name:16s} {ms:7.3f} ms per token "
                      f"{ms / bmm_ms:5.2f}x bmm's  (max |logits - bmm's| {diff:.1e})",
                      flush=True)
                if a.profile:
                    print(profile(decode, token, device, a.profile), flush=True)
    if a.json:
        print(json.dumps({"device": str(device), "machine": timing.machine(device),
                          "rows": rows}))


if __name__ == "__main__":
    main()
