"""The package against an earlier version of itself, side by side in one process: same weights, same
inputs, the same outputs required, then the time of each hot path, the two versions taking turns.

A refactor must not cost speed. Timing the old code in one run and the new in another compares two
moments of a machine whose speed drifts (other jobs, frequency scaling); here both versions are imported at
once — the working tree as `labnn`, the git ref's `labnn/` extracted into a temporary folder as
`labnn_ref` — and every timed block of one is followed by the same block of the other. Before timing,
each pair of models gets the same `state_dict` (so checkpoints of the ref load into the new code) and must
give the same logits, else the comparison stops: a faster wrong answer is no answer.

Hot paths (the benchmarks' defaults):

* `fused_step`: a training step (forward, cross-entropy, backward) of `FeedbackTransformerKV` with its fused
  loop, T = 128, batch 16, d_model 256, 8 heads, 4 layers, d_ff 1024 (`bench_feedback_kv.py`), and the
  parallel `TransformerLM`'s step beside it: the ratio fused / parallel is reported for each version;
* `feedback_decode`: `FeedbackTransformerKV.generate`, batch 1, ms per token;
* `xl_step`: `TransformerXL.step` through a full cache of attention length 1,024, batch 1, d_model 128,
  4 heads, 4 layers (`bench_xl.py`), ms per token, and the window-recomputing `TransformerLM` beside it:
  the speed-up of each version.

    python benchmarks/compare_refs.py                 # against HEAD
    python benchmarks/compare_refs.py --ref v0.1.0    # any git ref
    python benchmarks/compare_refs.py --quick         # tiny smoke run
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from labnn.training import timing

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 65
IMPORT = re.compile(r"^(\s*from|\s*import) labnn\b", re.MULTILINE)


def import_ref(ref: str, folder: Path):
    """`labnn/` as it was at git `ref`, imported as the package `labnn_ref`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", ref, "labnn"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    (folder / "labnn").rename(folder / "labnn_ref")
    for path in (folder / "labnn_ref").rglob("*.py"):  # its imports of itself, not of labnn
        text = path.read_text(encoding="utf-8")
        path.write_text(IMPORT.sub(r"\1 labnn_ref", text), encoding="utf-8")
    sys.path.insert(0, str(folder))
    return importlib.import_module("labnn_ref")


def module(pkg, *names: str):
    """The first of `names` that `pkg` has: a module keeps its content when the layout moves
    it (`feedback_kv` before the sub-packages, `feedback.kv` since)."""
    for name in names:
        try:
            return importlib.import_module(f"{pkg.__name__}.{name}")
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(f"{pkg.__name__} has none of {', '.join(names)}")


def build(pkg, name: str, sizes: dict):
    """One model of a version of the package, by the name of its hot path."""
    tf = module(pkg, "transformer")
    if name in ("fused", "feedback_decode"):
        kv = module(pkg, "feedback.kv", "feedback_kv")
        config = kv.FeedbackKVConfig(VOCAB, **sizes, max_distance=256)
        return kv.FeedbackTransformerKV(config)
    if name == "xl":
        xl = module(pkg, "xl.model", "xl")
        return xl.TransformerXL(xl.XLConfig(VOCAB, **sizes))
    return tf.TransformerLM(tf.TransformerConfig(VOCAB, **sizes))


def twins(ref, name: str, sizes: dict):
    """(new, ref) models of one kind with the same weights and the same outputs."""
    import labnn

    torch.manual_seed(0)
    new = build(labnn, name, dict(sizes))
    old = build(ref, name, dict(sizes))
    old.load_state_dict(new.state_dict())  # the ref's keys must be the new code's: checkpoints load
    tokens = torch.randint(VOCAB, (2, 9))
    with torch.no_grad():
        a, b = new(tokens)[0], old(tokens)[0]
    if not torch.allclose(a, b, atol=1e-5, rtol=1e-5):
        raise SystemExit(f"{name}: the two versions disagree (max |diff| {(a - b).abs().max():.2e})")
    return new, old


def train_step(model, tokens) -> None:
    logits, _ = model(tokens[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    model.zero_grad(set_to_none=True)
    loss.backward()


def in_turns(fns: dict, repeats: int, block: int) -> dict:
    """Median seconds of each function over `repeats` rounds; in a round each function runs one untimed
    call, then `block` timed ones, one function after the other."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            fn()
            for _ in range(block):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return times


def ratio(times: dict, a: str, b: str) -> float:
    """Median of the ratios a / b of calls made side by side."""
    return statistics.median(x / y for x, y in zip(times[a], times[b]))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", default="HEAD", help="git ref to compare with (default HEAD)")
    parser.add_argument("--repeats", type=int, default=5, help="rounds of turns")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="tiny smoke run")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as folder:
        ref = import_ref(args.ref, Path(folder))
        wide = dict(d_model=256, n_heads=8, n_layers=4, d_ff=1024)
        t, batch, attn = 128, 16, 1024
        if args.quick:
            wide, t, batch, attn = dict(d_model=32, n_heads=2, n_layers=2, d_ff=64), 16, 2, 32
        print(f"working tree vs {args.ref}: {timing.machine(torch.device('cpu'))}")

        fused, fused_ref = twins(ref, "fused", wide)
        par, par_ref = twins(ref, "parallel", dict(wide, seq_len=256))
        tokens = torch.randint(VOCAB, (batch, t + 1))
        times = in_turns({k: (lambda m=m: train_step(m, tokens)) for k, m in
                          {"fused": fused, "fused_ref": fused_ref, "par": par, "par_ref": par_ref}.items()},
                         args.repeats, 2)
        print(f"feedback fused training step, T={t}, B={batch}: "
              f"{1e3 * statistics.median(times['fused']):.0f} ms (ref "
              f"{1e3 * statistics.median(times['fused_ref']):.0f} ms), new/ref "
              f"{ratio(times, 'fused', 'fused_ref'):.3f}; fused/parallel "
              f"{ratio(times, 'fused', 'par'):.2f} (ref {ratio(times, 'fused_ref', 'par_ref'):.2f})")

        fused.eval(), fused_ref.eval()
        prompt = torch.zeros(1, 1, dtype=torch.long)
        n = 16 if args.quick else 128
        with torch.no_grad():
            times = in_turns({"new": lambda: fused.generate(prompt, n, temperature=0),
                              "ref": lambda: fused_ref.generate(prompt, n, temperature=0)},
                             args.repeats, 1)
        print(f"feedback decoding, batch 1: {1e3 * statistics.median(times['new']) / n:.3f} ms/token "
              f"(ref {1e3 * statistics.median(times['ref']) / n:.3f}), new/ref {ratio(times, 'new', 'ref'):.3f}")

        small = dict(d_model=32, n_heads=2, n_layers=2) if args.quick else dict(d_model=128, n_heads=4,
                                                                                n_layers=4)
        xl, xl_ref = twins(ref, "xl", dict(small, mem_len=attn - 1))
        vanilla, _ = twins(ref, "parallel", dict(small, seq_len=attn))
        xl.eval(), xl_ref.eval(), vanilla.eval()
        window = torch.randint(VOCAB, (1, attn))
        steps = 8 if args.quick else 64
        with torch.no_grad():
            caches = {"new": xl.step(window[:, :-1])[1], "ref": xl_ref.step(window[:, :-1])[1]}

            def run(name, model):
                for i in range(steps):
                    _, caches[name] = model.step(window[:, i : i + 1], caches[name])

            times = in_turns({"new": lambda: run("new", xl), "ref": lambda: run("ref", xl_ref),
                              "vanilla": lambda: vanilla(window)}, args.repeats, 2)
        per = {k: statistics.median(v) / steps for k, v in times.items() if k != "vanilla"}
        print(f"XL single-token step, attention length {attn}: {1e3 * per['new']:.3f} ms/token (ref "
              f"{1e3 * per['ref']:.3f}), new/ref {ratio(times, 'new', 'ref'):.3f}; speed-up over "
              f"recomputing the window {steps * ratio(times, 'vanilla', 'new'):.0f}x (ref "
              f"{steps * ratio(times, 'vanilla', 'ref'):.0f}x)")


if __name__ == "__main__":
    main()
