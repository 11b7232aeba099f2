"""Which layout of the keys a one-token step reads faster: the figures behind `KVBuffer`'s
`transposed` (`labnn.nn.kv_cache`) and XL's `key_table` (`labnn.xl.relative_attention`).

One query per head (batch 1, 4 heads of width 32, as the notebooks' models), each row
printed as it is measured, the two layouts side by side in one process:

* `scores`: $q K^\\top$ written out (Transformer-XL's step), $K^\\top$ stored `[B, H, D_h, C]`
  (contiguous rows of $K^\\top$) against $K$ stored `[B, H, C, D_h]` and seen transposed;
* `fused`: `torch.nn.functional.scaled_dot_product_attention` (`TransformerLM`'s step),
  $K$ stored `[B, H, C, D_h]` against a transposed view of a `[B, H, D_h, C]` store;
* `table`: the query times XL's relative keys, the contiguous `[H, D_h, n]` table of
  `key_table` against the view `heads_first(r)` of the projection `[n, H, D_h]`.

Times: `torch.utils.benchmark.Timer.blocked_autorange` (median), on the CPU by default
with the threads torch has (set `OMP_NUM_THREADS=1` for one).

    OMP_NUM_THREADS=1 python benchmarks/key_layouts.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.benchmark import Timer

from labnn.training import timing

H, D_H = 4, 32


def median_us(stmt: str, **tensors: torch.Tensor) -> float:
    """The median of `stmt`'s blocked runs, in microseconds."""
    timer = Timer(stmt, globals={"F": F, **tensors})
    return timer.blocked_autorange(min_run_time=0.5).median * 1e6


def row(name: str, keys: int, fast: tuple[str, float], slow: tuple[str, float]) -> None:
    (a, ta), (b, tb) = fast, slow
    print(f"{name:7s} {keys:5d} keys: {a} {ta:6.1f} us, {b} {tb:6.1f} us "
          f"({tb / ta:.2f}x)", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[128, 1024, 2048])
    args = parser.parse_args()
    print(timing.machine(torch.device("cpu")), flush=True)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, H, 1, D_H, generator=g)
    for c in args.keys:
        k_rows = torch.randn(1, H, c, D_H, generator=g)  # [B, H, C, D_h]
        k_t = k_rows.transpose(-2, -1).contiguous()  # [B, H, D_h, C]
        v = torch.randn(1, H, c, D_H, generator=g)
        row("scores", c, ("K^T stored", median_us("q @ k_t", q=q, k_t=k_t)),
            ("K stored", median_us("q @ k.transpose(-2, -1)", q=q, k=k_rows)))
        row("fused", c,
            ("K stored", median_us("F.scaled_dot_product_attention(q, k, v)",
                                   q=q, k=k_rows, v=v)),
            ("K^T stored", median_us("F.scaled_dot_product_attention(q, k, v)",
                                     q=q, k=k_t.transpose(-2, -1), v=v)))
        r = torch.randn(c, H, D_H, generator=g)  # the projection of n distances
        table = r.permute(1, 2, 0).contiguous()  # key_table: [H, D_h, n]
        row("table", c, ("key_table", median_us("q[0] @ table", q=q, table=table)),
            ("heads_first view", median_us("q[0] @ r.permute(1, 2, 0)", q=q, r=r)))


if __name__ == "__main__":
    main()
