"""Figures a notebook states twice, in its prose and in a claim's `fast_caveat`, must agree:
the caveat is printed under the check, beside the prose that quotes the same runs."""

import json
import re
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"


def cells(name, kind):
    nb = json.loads((NOTEBOOKS / name).read_text(encoding="utf-8"))
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == kind]


def test_notebook_04_fast_copy_ratio_range_is_the_same_in_prose_and_caveat():
    """The fast-mode range of KV + torch.stack over KV + Stack at T = 32: the prose of section 7
    and the caveat of its check quote the same runs (they once said 0.85-1.44x and 0.85-1.13x)."""
    prose = " ".join(" ".join(cells("04_kv_sharing_stack.ipynb", "markdown")).split())
    code = " ".join(cells("04_kv_sharing_stack.ipynb", "code"))
    in_prose = re.findall(r"\((\d\.\d+)[–-](\d\.\d+)× in the fast runs we made", prose)
    in_caveat = re.findall(r"fast \"\s*\"mode measured (\d\.\d+)-(\d\.\d+)x in the runs made", code)
    assert len(in_prose) == 1 and len(in_caveat) == 1, (in_prose, in_caveat)
    assert in_prose == in_caveat, f"prose says {in_prose[0]}, the caveat {in_caveat[0]}"
