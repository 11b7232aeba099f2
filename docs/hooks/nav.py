"""Build the navigation from what exists: every notebook, every module, modules grouped along the learning path.

Notebooks come in file order (`01_…` to `04_…`). The source and API sections list the package's overview,
then its modules grouped by topic in the order the notebooks meet them (TOPICS); a module no topic names
still appears, under "Other modules", so nothing is ever left out of the navigation.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402

log = logging.getLogger("mkdocs.hooks.nav")

# (topic, module page stems), in learning-path order; stems as in layout.Module.stem.
TOPICS: list[tuple[str, list[str]]] = [
    ("Attention and the transformer", ["attention", "kv_cache", "positions", "layers",
                                       "transformer", "generation"]),
    ("Transformer-XL", ["relative_attention", "xl_block", "xl", "xl_memory", "xl_cache"]),
    ("Feedback Transformer", ["feedback_layer", "feedback", "feedback_kv", "stack",
                              "step_linear", "feedback_loop", "feedback_loop_buffers",
                              "feedback_loop_backward"]),
    ("Compiled generation", ["ring_cache", "compiled"]),
    ("Data", ["data", "data/shakespeare", "data/tokenizer", "data/batching", "data/synthetic",
              "data/program_language", "data/programs", "data/recall"]),
    ("Training and tools", ["train_config", "optim", "train", "evaluate", "distributed",
                            "progress", "checkpoint", "plot", "plot_attention", "checks",
                            "cli_options", "cli", "__main__", "device_audit"]),
    ("Exercise checkers", ["exercises", "exercises/attention", "exercises/heads",
                           "exercises/xl", "exercises/xl_memory", "exercises/feedback",
                           "exercises/token_loop", "exercises/stack", "exercises/append",
                           "exercises/kv_sharing", "exercises/memories",
                           "exercises/recall_score", "exercises/memory_limits",
                           "exercises/checking", "exercises/compare", "exercises/isolation",
                           "exercises/outcomes",
                           "exercises/claims"]),
]


def grouped(mods: list[layout.Module], folder: str, overview: str) -> list:
    by_stem = {m.stem: m for m in mods}
    entries: list = []
    if "index" in by_stem:
        entries.append({overview: f"{folder}/index.md"})
    placed = {"index"}
    for topic, stems in TOPICS:
        pages = [{by_stem[s].short: f"{folder}/{s}.md"} for s in stems if s in by_stem]
        placed.update(stems)
        if pages:
            entries.append({topic: pages})
    rest = [m for m in mods if m.stem not in placed]
    if rest:
        log.info("Modules in no topic of docs/hooks/nav.py (listed under Other modules): %s",
                 ", ".join(m.name for m in rest))
        entries.append({"Other modules": [{m.short: f"{folder}/{m.stem}.md"} for m in rest]})
    return entries


def on_config(config):
    mods = layout.modules()
    config["nav"] = [
        {"Home": "index.md"},
        {"Notebooks": [{layout.notebook_title(p): f"notebooks/{p.name}"} for p in layout.notebooks()]},
        {"Annotated source": grouped(mods, "source", "The package: annotated source")},
        {"API reference": grouped(mods, "api", "The package: API reference")},
        {"Benchmarks": "benchmarks.md"},
        # How to run it elsewhere: one tab, not three
        {"Running labnn": [{"On a GPU": "gpu.md"}, {"On several processes": "distributed.md"},
                           {"torch versions, Colab": "compatibility.md"}]},
    ]
    return config
