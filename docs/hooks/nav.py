"""Build the navigation from what exists: every notebook, every module (no hand-kept list)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402


def on_config(config):
    mods = layout.modules()
    config["nav"] = [
        {"Home": "index.md"},
        {"Notebooks": [{layout.notebook_title(p): f"notebooks/{p.name}"} for p in layout.notebooks()]},
        {"Annotated source": [{m.short: f"source/{m.stem}.md"} for m in mods]},
        {"API reference": [{m.short: f"api/{m.stem}.md"} for m in mods]},
        {"Benchmarks": "benchmarks.md"},
        {"GPU": "gpu.md"},
    ]
    return config
