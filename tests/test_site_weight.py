"""What keeps the site light without a reader losing anything (the budgets themselves are
tests/test_site_interactive.py's `test_weight_budgets`, over the built site).

The annotated source's code: a span only where the stylesheet or site.js uses one; the theme's lunr
language scripts: not in a site whose search is English only (its worker loads none of them).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "docs" / "hooks"))
import annotated  # noqa: E402
import vendor  # noqa: E402

_CODE = "class A:\n    def f(self, x):\n        y = x.shape  # note\n        return y\n"


def test_annotated_code_has_a_span_only_where_a_style_or_site_js_uses_it():
    """Plain names and whitespace inside a line were each a span (`.n`, `.w`) that Material draws
    as the code's own text: a tenth of the annotated pages. A line's first token keeps its span
    (site.js holds it beside the line's number), as do punctuation and operators (labnn.css
    breaks a line after them) and every coloured token."""
    lines = annotated._highlighted_lines(_CODE)
    assert lines[1] == ('    <span class="k">def</span> <span class="nf">f</span><span class="p">(</span>'
                        '<span class="bp">self</span><span class="p">,</span> x<span class="p">):</span>')
    assert lines[2].startswith('        <span class="n">y</span> <span class="o">=</span> x<span class="o">.</span>shape')
    assert '<span class="c1"># note</span>' in lines[2]
    assert lines[3] == '        <span class="k">return</span> y'
    assert re.sub(r"<[^>]+>", "", "\n".join(lines)) == _CODE  # the code itself, all of it


def test_an_annotated_line_at_column_0_sets_no_indentation():
    """labnn.css reads a line's indentation from `--i`, 0 when unset: no `--i:0ch` on each line."""
    first = annotated._line_html(0, '<span class="k">class</span> A:', "class A:")
    indented = annotated._line_html(1, "    x", "    x")
    assert first == '<span class="ann-line"><span class="ann-ln" data-ln="1"></span><span class="k">class</span> A:\n</span>'
    assert indented.startswith('<span class="ann-line" style="--i:4ch">')


def _files(*uris: str):
    class Files(list):
        def remove(self, file):
            super().remove(file)
    return Files(SimpleNamespace(src_uri=u, abs_src_path=__file__) for u in uris)


@pytest.mark.parametrize(("lang", "kept"), [(None, 1), (["en"], 1), (["en", "ja"], 3)])
def test_lunr_language_scripts_only_for_a_search_in_other_languages(lang, kept):
    """The search worker loads `assets/javascripts/lunr/` only for a language other than English
    (0.9 MB of the site: 30 stemmers, Thai and Japanese word splitters)."""
    plugins = {"material/search": SimpleNamespace(config=SimpleNamespace(lang=lang))}
    files = _files("assets/javascripts/bundle.js", "assets/javascripts/lunr/min/lunr.ja.min.js",
                   "assets/javascripts/lunr/tinyseg.js")
    assert len(vendor.on_files(files, SimpleNamespace(plugins=plugins))) == kept
