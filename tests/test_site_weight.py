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


def test_the_repository_icon_is_drawn_by_the_stylesheet_and_is_theme_icon_repo():
    """Material inlined the repository's icon (625 bytes) twice in every page: labnn.css draws it
    once, as a mask (docs/overrides/partials/source.html). Another `theme.icon.repo` in mkdocs.yml
    needs its path there too."""
    import material
    root = Path(__file__).resolve().parents[1]
    config = (root / "mkdocs.yml").read_text(encoding="utf-8")
    icon = re.search(r"^\s+repo:\s*(\S+)", config, re.M)[1]
    svg = (Path(material.__file__).parent / "templates" / ".icons" / f"{icon}.svg").read_text()
    css = (root / "docs" / "assets" / "stylesheets" / "labnn.css").read_text(encoding="utf-8")
    template = (root / "docs/overrides/partials/source.html").read_text(encoding="utf-8")
    drawn = re.search(r"--labnn-repo-icon: url\((.*)\);", css)[1]
    assert re.search(r' d="([^"]+)"', svg)[1] in drawn
    assert 'class="labnn-repo-icon"' in template and ".icons/" not in template


def test_the_palette_toggle_icons_are_drawn_by_the_stylesheet():
    """Each theme.palette toggle icon in mkdocs.yml has its class in labnn.css with the theme's own
    path (docs/overrides/partials/palette.html draws them as masks, not inline SVGs)."""
    import material
    root = Path(__file__).resolve().parents[1]
    config = (root / "mkdocs.yml").read_text(encoding="utf-8")
    icons = re.findall(r"^\s+icon:\s*(material/weather-\S+)", config, re.M)
    css = (root / "docs" / "assets" / "stylesheets" / "labnn.css").read_text(encoding="utf-8")
    assert len(icons) == 2
    for icon in icons:
        svg = (Path(material.__file__).parent / "templates" / ".icons" / f"{icon}.svg").read_text()
        name = icon.replace("/", "-")
        rule = re.search(r"\.labnn-icon--" + name + r" \{\s*--labnn-icon: url\((.*)\);", css)
        assert rule and re.search(r' d="([^"]+)"', svg)[1] in rule[1], icon


def test_the_logo_is_drawn_by_the_stylesheet():
    """No theme.logo nor theme.icon.logo in mkdocs.yml: the logo is Material's material/library,
    which labnn.css draws (docs/overrides/partials/logo.html) with the theme's own path."""
    import material
    root = Path(__file__).resolve().parents[1]
    assert not re.search(r"^\s+logo:", (root / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    svg = (Path(material.__file__).parent / "templates/.icons/material/library.svg").read_text()
    css = (root / "docs" / "assets" / "stylesheets" / "labnn.css").read_text(encoding="utf-8")
    rule = re.search(r"\.md-logo \.labnn-logo \{\s*--labnn-icon: url\((.*)\);", css)
    assert rule and re.search(r' d="([^"]+)"', svg)[1] in rule[1]
