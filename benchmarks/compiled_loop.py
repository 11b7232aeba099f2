"""Does `torch.compile` make the readable feedback token loop as fast as the hand-written one?

The evidence behind keeping `labnn.feedback.fused.loop` (the token loop backpropagated by hand): the loop
notebook 04 builds — every step runs each `FeedbackLayer` as it is, then pushes its memory vector's key
and value onto a `Stack` — with the per-step computation compiled by `torch.compile` (dynamic shapes: the
number of keys grows by one each step), against the fused loop and the parallel transformer (eager, and
compiled as a whole, `torch.compile(model)`), each timed in turns with the eager parallel
transformer in one process, its row printed as soon as it is measured (d_model 256,
8 heads, 4 layers, d_ff 1024, T = 128, batch 16, as in `bench_feedback_kv.py`). The compile times are
reported apart; the first compiled step also checks that the compiled loop's loss and gradients equal
the fused loop's.

If the compiled readable loop came within 10 % of the fused loop, the hand-written backward could go.

    python benchmarks/compiled_loop.py            # T = 128, batch 16 (compiling takes minutes)
    python benchmarks/compiled_loop.py --quick    # tiny, compiled with the eager backend

The tests run `--quick` only: compiling with inductor needs a C++ compiler and minutes of CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from labnn.feedback.kv import FeedbackKVConfig, FeedbackTransformerKV
from labnn.feedback.layer import RelativeBias
from labnn.training import timing
from labnn.feedback.stack import Stack
from labnn.transformer import TransformerConfig, TransformerLM

VOCAB = 65


def token(model: FeedbackTransformerKV, x_i, q_i, k, v, biases):
    """One step of the readable loop: every layer, then the new key/value row.

    Shape:
        x_i and q_i `[B, D]`, k and v `[B, H, S, D_h]`, biases `[L, H, S]` ->
        (top output `[B, D]`, keys/values `[2, B, H, D_h]`).
    """
    xs = [x_i]
    for j, layer in enumerate(model.layers):
        query = q_i if j == 0 else None
        xs.append(layer(xs[-1], k, v, bias=biases[j], query=query))
    m_t = model.norm_mem(model.mix(torch.stack(xs)))
    b, h = x_i.size(0), model.config.n_heads
    return xs[-1], model.kv(m_t).view(b, 2, h, -1).transpose(0, 1)


def readable_loop(model: FeedbackTransformerKV, tokens, step_fn):
    """Logits of the readable loop with `step_fn` (eager `token` or its compiled form)."""
    x = model.embed(tokens)
    first = model.layers[0]
    q0 = first.attn.q(first.norm_attn(x))
    (b, t, _), h = x.shape, model.config.n_heads
    stack = Stack(t, x.new_empty(2, b, h, model.config.d_model // h), dim=3)
    tables = torch.stack([layer.attn.rel.bias for layer in model.layers])
    biases = RelativeBias.lookup(tables, t)  # [L, H, T], the nearest key last
    kv, tops = None, []
    for i, (x_i, q_i) in enumerate(zip(x.unbind(1), q0.unbind(1))):
        if i == 0:  # nothing to attend to: S = 0
            k = v = x.new_zeros(b, h, 0, model.config.d_model // h)
        else:
            k, v = kv.unbind(0)
        top, row = step_fn(model, x_i, q_i, k, v, biases[:, :, t - i :])
        tops.append(top)
        kv = stack.push(row)
    return model.head(torch.stack(tops, 1))


def train_step(forward, tokens, model) -> torch.Tensor:
    logits = forward(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    model.zero_grad(set_to_none=True)
    loss.backward()
    return loss.detach()


def paired_times(fn, base, repeats: int) -> tuple[list[float], list[float]]:
    """Seconds of `fn`'s training steps and of `base`'s, in turns: each round runs one
    untimed and two timed steps of `base`, then of `fn`, so that a change of load hits
    both alike. Returns both lists, pair by pair."""
    mine, theirs = [], []
    for _ in range(repeats):
        for work, into in ((base, theirs), (fn, mine)):
            work()
            for _ in range(2):
                start = time.perf_counter()
                work()
                into.append(time.perf_counter() - start)
    return mine, theirs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="rounds of turns")
    parser.add_argument("--backend", default="inductor", help="torch.compile's backend")
    parser.add_argument("--quick", action="store_true", help="tiny, eager backend")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"cpu: {timing.machine(torch.device('cpu'))}", flush=True)
    dims = dict(d_model=256, n_heads=8, n_layers=4, d_ff=1024)
    t, batch = 128, 16
    if args.quick:
        dims, t, batch = dict(d_model=32, n_heads=2, n_layers=2, d_ff=64), 8, 2
        args.backend = "eager"
    torch.manual_seed(0)
    fused = FeedbackTransformerKV(FeedbackKVConfig(VOCAB, **dims, max_distance=t))
    readable = FeedbackTransformerKV(FeedbackKVConfig(VOCAB, **dims, max_distance=t))
    readable.load_state_dict(fused.state_dict())
    parallel = TransformerLM(TransformerConfig(VOCAB, **dims, seq_len=t))
    tokens = torch.randint(VOCAB, (batch, t + 1))
    compiled = torch.compile(token, dynamic=True, backend=args.backend)

    want = train_step(lambda x: fused(x)[0], tokens, fused)
    grads = [p.grad.clone() for p in fused.parameters()]
    start = time.perf_counter()
    got = train_step(lambda x: readable_loop(readable, x, compiled), tokens, readable)
    compile_s = time.perf_counter() - start
    worst = max((p.grad - g).abs().max().item() for p, g in zip(readable.parameters(), grads))
    print(f"compiled readable loop: first step (compiling) {compile_s:.0f} s; |loss - fused| "
          f"{abs(got - want).item():.1e}, largest gradient difference {worst:.1e}", flush=True)
    parallel_compiled = torch.compile(parallel, backend=args.backend)
    start = time.perf_counter()
    train_step(lambda x: parallel_compiled(x)[0], tokens, parallel)
    print(f"compiled parallel transformer: first step (compiling) "
          f"{time.perf_counter() - start:.0f} s", flush=True)

    base = lambda: train_step(lambda x: parallel(x)[0], tokens, parallel)  # noqa: E731
    steps = {
        "fused": lambda: train_step(lambda x: fused(x)[0], tokens, fused),
        "parallel compiled": lambda: train_step(lambda x: parallel_compiled(x)[0], tokens,
                                                parallel),
        "compiled": lambda: train_step(lambda x: readable_loop(readable, x, compiled),
                                       tokens, readable),
        "eager": lambda: train_step(lambda x: readable_loop(readable, x, token),
                                    tokens, readable),
    }
    print(f"training step, T={t}, batch {batch}, {args.threads} thread(s); each row timed "
          f"in turns with the parallel transformer ({2 * args.repeats} pairs, medians; the "
          "other ratios divide two rows' ratios to it):", flush=True)
    to_parallel = {}
    for name, fn in steps.items():
        mine, theirs = paired_times(fn, base, args.repeats)
        ratio = to_parallel[name] = statistics.median(a / b for a, b in zip(mine, theirs))
        refs = [r for r in ("parallel compiled", "fused") if r in to_parallel and r != name]
        others = "".join(f"  {ratio / to_parallel[r]:5.2f}x {r}" for r in refs)
        print(f"  {name:17s} {1e3 * statistics.median(mine):7.0f} ms  {ratio:5.2f}x "
              f"parallel ({1e3 * statistics.median(theirs):.0f} ms){others}", flush=True)


if __name__ == "__main__":
    main()
