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
    first = annotated._line_html(0, '<span class="k">class</span> A:', "class A:", first=True)
    indented = annotated._line_html(1, "    x", "    x")
    assert first == '<span class="ann-line"><span class="k">class</span> A:\n</span>'
    assert indented == '<span class="ann-line" style="--i:4ch">    x\n</span>'


def test_an_annotated_line_number_is_a_css_counter_set_only_where_the_numbers_jump(tmp_path):
    """Each line's number was an element, `<span class="ann-ln" data-ln="15"></span>`: 0.9 MB of
    the site. labnn.css counts the lines; `--n` restarts the count at a section's first line (unless
    it is line 1) and after a gap (a docstring left out), and the lines between count on."""
    source = "def f(x):\n    \"\"\"Doc.\"\"\"\n    y = x\n    return y\n"
    section = annotated.Section(lines=[0, 2, 3])
    (tmp_path / "m.py").write_text(source, encoding="utf-8")
    module = SimpleNamespace(name="labnn.m", path=tmp_path / "m.py", rel_path="labnn/m.py",
                             stem="m")
    _, codes = annotated.annotated_page(module, "https://github.com/x/y", sections=[section])
    starts = re.findall(r'<span class="ann-line([^"]*)"(?: style="([^"]*)")?>', codes[0])
    assert starts == [("", ""), (" ann-gap", "--i:4ch;--n:3"), ("", "--i:4ch")]
    assert "ann-ln" not in codes[0] and "data-ln" not in codes[0]
    later = annotated._line_html(14, "from", "from", first=True)
    assert later == '<span class="ann-line" style="--n:15">from\n</span>'


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


# Material's settings for the icons it inlines in every page (header, drawer, search form, footer,
# Back to top; `alternate`: the language switch of docs/hooks/i18n.py).
_PAGE_ICONS = {"repo", "logo", "menu", "search", "alternate", "previous", "next", "top", "close"}


def test_the_icons_of_every_page_are_drawn_by_the_stylesheet_as_materials():
    """Material inlined each of its icons as an SVG path in every page (its search icon, 290 bytes,
    twice, 0.22 MB of the site; the repository's 625 bytes twice...). mkdocs.yml names each from the
    set labnn/: an empty <svg> (docs/overrides/.icons/labnn/) of a class whose rule in labnn.css
    draws Material's icon of the same name, with the theme's own path."""
    import material
    import yaml
    root = Path(__file__).resolve().parents[1]
    theme = yaml.safe_load((root / "mkdocs.yml").read_text(encoding="utf-8"))["theme"]
    named = {key: theme["icon"].get(key) for key in _PAGE_ICONS}
    named.update({f"toggle {o['scheme']}": o["toggle"]["icon"] for o in theme["palette"]})
    css = (root / "docs" / "assets" / "stylesheets" / "labnn.css").read_text(encoding="utf-8")
    problems = []
    for key, icon in named.items():
        if not (icon or "").startswith("labnn/"):
            problems.append(f"{key}: {icon!r}, not an icon of the set labnn/")
            continue
        name = icon.removeprefix("labnn/")
        ours = (root / "docs" / "overrides" / ".icons" / f"{icon}.svg").read_text(encoding="utf-8")
        svg = (Path(material.__file__).parent / "templates" / ".icons" / "material" / f"{name}.svg")
        rule = re.search(r"\.labnn-icon--" + name + r" \{\s*--labnn-icon: url\((.*)\);", css)
        if f'class="labnn-icon labnn-icon--{name}"' not in ours or "<path" in ours:
            problems.append(f"{key}: {icon}.svg is not an empty <svg> of class labnn-icon--{name}")
        if not rule or re.search(r' d="([^"]+)"', svg.read_text())[1] not in rule[1]:
            problems.append(f"{key}: labnn.css does not draw material/{name} for .labnn-icon--{name}")
    assert not problems, "\n  ".join(problems)
