"""Annotated source (`source/<module>/`) and API reference (`api/<module>/`) pages, generated from `labnn/`.

In the spirit of labml's annotated implementations: each module is cut into sections at its top-level
functions and classes and at each method; a docstring, or the comment block above a definition, becomes
the section's note (markdown with `$...$` math, Google-style `Args:`/`Shape:`/`Returns:` turned into
lists), shown left of the code it describes (stacked on narrow screens). A comment block inside a body
starts a new section with the comment as its note. Code is highlighted once per module with Pygments
(the classes pymdownx.highlight and Material style), with the file's own line numbers.

Notes are markdown rendered by MkDocs itself (same extensions as every page, math by KaTeX); the code is
inserted afterwards (on_page_content) where the markdown holds a placeholder, so Python-Markdown never
sees it. API pages hold one `::: labnn.x` directive each, for mkdocstrings. Why a hook: mkdocstrings'
`show_source` puts a method's whole source under its documentation, not the notes beside the lines they
describe, and pycco/labml's generator write whole HTML sites of their own, outside the MkDocs theme.
"""

from __future__ import annotations

import ast
import json
import posixpath
import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File
from pygments import format as pygments_format
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer
from pygments.token import Name, Text, Whitespace

sys.path.insert(0, str(Path(__file__).parent))
import layout  # noqa: E402
from griffe_math import isolate_display_math  # noqa: E402 (the docstrings' `$$` for notes too)

_code: dict[str, list[str]] = {}  # page src_uri -> highlighted code of each section
_PLACEHOLDER = re.compile(r'<div class="ann-code" data-code="(\d+)"></div>')
_GOOGLE = re.compile(
    r"^(Args|Arguments|Parameters|Attributes|Shape|Shapes|Returns|Yields|Raises|Example|Examples|Note|Notes"
    r"|Warning|Warnings|See Also|References):\s*$"
)
# "name (type): description" / "`push(value)`: value ...": a short name (no sentence) before the colon.
_ENTRY = re.compile(r"^((?:`[^`]+`|[\w.*\[\]()]+)(?:,\s*(?:`[^`]+`|[\w.*\[\]]+))*(?:\s*\([^)]*\))?):\s+(.*)$")
SOURCE_BOOST, API_BOOST = 0.1, 0.07  # search rank against a lesson's 1 (`_boost`)
_ENTRY_SECTIONS = {"Args", "Arguments", "Parameters", "Attributes", "Raises", "Shape", "Shapes"}


@dataclass
class Section:
    heading: str = ""
    anchor: str = ""
    level: int = 2
    note: list[str] = field(default_factory=list)  # markdown paragraphs
    lines: list[int] = field(default_factory=list)  # 0-based source line numbers shown as code


def google_to_markdown(doc: str) -> str:
    """A Google-style docstring as markdown: sections become bold labels with lists, examples code."""
    out: list[str] = []
    lines = textwrap.dedent(doc).strip("\n").splitlines()
    i = 0
    while i < len(lines):
        match = _GOOGLE.match(lines[i])
        if not match:
            out.append(lines[i])
            i += 1
            continue
        name = match.group(1)
        body = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or lines[i][:1].isspace()):
            body.append(lines[i])
            i += 1
        body_text = textwrap.dedent("\n".join(body)).strip("\n")
        out += ["", f"**{name}**", ""]
        if name.startswith("Example"):
            out += ["```pycon" if ">>>" in body_text else "```python", body_text, "```", ""]
        elif name in _ENTRY_SECTIONS:
            out += _entries(body_text) + [""]
        elif name.startswith(("Note", "Warning")):
            kind = "note" if name.startswith("Note") else "warning"
            out += [f"!!! {kind}", textwrap.indent(body_text, "    "), ""]
        else:
            out += [re.sub(r"\n\s+", " ", body_text), ""]
    return isolate_display_math("\n".join(out))


def _entries(text: str) -> list[str]:
    """`name (type): description` lines (continuations indented) as a markdown list."""
    items: list[str] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        if line[:1].isspace() and items:
            items[-1] += " " + line.strip()
            continue
        entry = _ENTRY.match(line)
        if not entry and items:  # a sentence wrapped at the same indentation continues its entry
            items[-1] += " " + line.strip()
            continue
        if entry:
            items.append(f"- `{entry.group(1).strip().replace('`', '')}`: {entry.group(2).strip()}")
        else:
            items.append(f"- {line.strip()}")
    return items


def _slug(name: str) -> str:
    """An anchor for a Python name: a dunder or sunder without its underscores (`__init__` -> `init`,
    `_repr_html_` -> `repr_html`: Markdown read `{#A._repr_html_}` as emphasis, and the heading showed
    `{#A.repr_html}` under a made-up id), any other name as it is, so that `_forward` and `forward` get
    two anchors (one anchor for both made two search entries of one location, which broke the search
    worker's highlighting: no results for `Stack`).

    Links to a section: `../source/xl/model.md#TransformerXL.forward`, `../source/xl/model.md#relative_shift`.
    """
    wrapped = len(name) > 2 and name.startswith("_") and name.endswith("_") and name.strip("_")
    return name.strip("_") if wrapped else name


def _docstring_range(node) -> tuple[int, int] | None:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
            and isinstance(body[0].value.value, str):
        return body[0].lineno - 1, body[0].end_lineno - 1
    return None


def split_module(source: str) -> list[Section]:
    """Cut a module into sections (see the module docstring)."""
    lines = source.splitlines()
    tree = ast.parse(source)
    starts: dict[int, Section] = {}
    dropped: set[int] = set()

    def defines(node, heading: str, anchor: str, level: int) -> None:
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])]) - 1
        while first > 0 and lines[first - 1].strip().startswith("#"):
            first -= 1
        section = Section(heading, anchor, level)
        doc = ast.get_docstring(node)
        if doc:
            section.note.append(google_to_markdown(doc))
        rng = _docstring_range(node)
        if rng:
            dropped.update(range(rng[0], rng[1] + 1))
        starts[first] = section

    intro = Section()
    doc = ast.get_docstring(tree)
    if doc:
        intro.note.append(google_to_markdown(doc))
    rng = _docstring_range(tree)
    if rng:
        dropped.update(range(rng[0], rng[1] + 1))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            defines(node, f"class `{node.name}`", node.name, 2)
            for child in node.body:
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    defines(child, f"`{node.name}.{child.name}`", f"{node.name}.{_slug(child.name)}", 3)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defines(node, f"`{node.name}`", _slug(node.name), 2)

    sections = [intro]
    current = intro
    comment: list[str] = []
    for i, line in enumerate(lines):
        if i in starts:
            current = starts[i]
            sections.append(current)
        if i in dropped:
            continue
        stripped = line.strip()
        if stripped.startswith("#") and not stripped.startswith("#!"):
            comment.append(stripped[1:].removeprefix(" "))
            continue
        if comment:
            note = isolate_display_math("\n".join(comment))
            comment = []
            if current.lines and any(lines[j].strip() for j in current.lines):
                current = Section(level=current.level)  # a comment inside a body starts a new section
                sections.append(current)
            current.note.append(note)
        current.lines.append(i)
    for section in sections:  # trim blank code lines at both ends
        while section.lines and not lines[section.lines[-1]].strip():
            section.lines.pop()
        while section.lines and not lines[section.lines[0]].strip():
            section.lines.pop(0)
    return [s for s in sections if s.lines or s.note or s.heading]


def _highlighted_lines(source: str) -> list[str]:
    """Pygments HTML of each source line (Pygments closes its spans at every line end)."""
    tokens = _unstyled_as_text(PythonLexer(stripnl=False).get_tokens(source))
    return pygments_format(tokens, HtmlFormatter(nowrap=True)).split("\n")


def _unstyled_as_text(tokens):
    """Plain names (`.n`) and whitespace (`.w`) after a line's first token as bare text: Material
    gives `.n` the code's own colour (`--md-code-hl-name-color`) and `.w` no style, and their spans
    were a tenth of the annotated pages' weight (the site's budget: tests/test_site_interactive.py).
    A line's first token keeps its span: site.js holds it beside the line's number and indentation.
    Every other token keeps its span too (labnn.css breaks lines after `.p`/`.o`)."""
    started = False  # a token other than whitespace met on this line
    for kind, value in tokens:
        if started and kind in (Name, Whitespace):
            kind = Text
        if "\n" in value:
            started = bool(value.rsplit("\n", 1)[1].strip())
        elif value.strip():
            started = True
        yield kind, value


def _line_html(n: int, highlighted: str, text: str, gap: bool = False, first: bool = False) -> str:
    """One source line as a block; labnn.css numbers it (a CSS counter: no number in the HTML, none
    copied), and `--n` restarts the count where the lines jump: a section's `first` line, a `gap`
    (the lines before it, a docstring, are the note; labnn.css says so). `--i`, the line's
    indentation, lets a line longer than the column wrap under itself instead of scrolling."""
    indent = len(text) - len(text.lstrip(" "))
    style = f"--i:{indent}ch;" * bool(indent) + f"--n:{n + 1}" * ((first and n > 0) or gap)
    style = f' style="{style.rstrip(";")}"' if style else ""  # labnn.css: no --i is 0ch
    return f'<span class="ann-line{" ann-gap" * gap}"{style}>{highlighted}\n</span>'


def annotated_page(module: layout.Module, repo_url: str, sections: list[Section] | None = None,
                   labels: tuple[str, str, str] = ("Annotated source of", "API reference", "on GitHub"),
                   ) -> tuple[str, list[str]]:
    """The page's markdown and each section's code; `sections` and `labels` (the links line) given by the
    Chinese page (i18n.py), the notes translated."""
    source = module.path.read_text(encoding="utf-8")
    lines = _highlighted_lines(source)
    source_lines = source.splitlines() + [""]
    blob = layout.repo_blob_url(repo_url, module.rel_path)
    md = [
        "---",
        "hide: [toc]",
        f"search: {{boost: {_boost(module, SOURCE_BOOST)}}}",
        "---",
        "",
        f"# `{module.rel_path}`",
        "",
        f"{labels[0]} `{module.name}` · "
        f"[{labels[1]}]({_rel(f'source/{module.stem}.md', f'api/{module.stem}.md')}) · "
        f"[{labels[2]}]({blob})",
        "{ .ann-links }",
        "",
        '<div class="ann" markdown>',
        "",
    ]
    codes: list[str] = []
    for section in split_module(source) if sections is None else sections:
        code_html = ""
        if section.lines:
            rows = "".join(_line_html(n, lines[n] if n < len(lines) else "", source_lines[n],
                                      gap=k > 0 and n - section.lines[k - 1] > 1, first=k == 0)
                           for k, n in enumerate(section.lines))
            code_html = f'<div class="highlight"><pre><span></span><code>{rows}</code></pre></div>'
        codes.append(code_html)
        md += ['<div class="ann-section" markdown>', '<div class="ann-note" markdown>', ""]
        if section.heading:
            md += [f"{'#' * section.level} {section.heading} {{#{section.anchor}}}", ""]
        md += [*section.note, "", "</div>", f'<div class="ann-code" data-code="{len(codes) - 1}"></div>', "</div>", ""]
    md += ["</div>", ""]
    return "\n".join(md), codes


def _rel(from_uri: str, to_uri: str) -> str:
    return posixpath.relpath(to_uri, posixpath.dirname(from_uri))


def api_page(module: layout.Module) -> str:
    """A module's API page. A package's page documents what its `__init__` defines, not what it
    re-exports: each object once, on the page of the module that defines it (and found there by
    search); the package's page links each export there."""
    directive = [f"::: {module.name}"]
    if module.path.name == "__init__.py":
        tree = ast.parse(module.path.read_text(encoding="utf-8"))
        own = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        directive += ["    options:", f"      members: {json.dumps(own) if own else 'false'}"]
        links = [f"[`{name}`][{path}]" for name, path in _exports(tree)]
        directive += ["", "Exported here, documented with the module that defines it: "
                      + ", ".join(links) + "."] if links else []
    source = _rel(f"api/{module.stem}.md", f"source/{module.stem}.md")
    return "\n".join(["---", f"search: {{boost: {_boost(module, API_BOOST)}}}", "---",
                      f"# `{module.name}`", "", f"[Annotated source]({source}) of `{module.rel_path}`.", "", *directive, ""])


def _boost(module, package: float) -> float:
    """Search rank of a module's page against a lesson's 1 (Material's `search.boost`): `package`
    for the package, 0.3 times that for the exercise checkers, 0.2 times for the slips they name
    (whose docstrings say every term a lesson says).

    Low, because a name in a heading outweighs any rank: with `_` no separator (mkdocs.yml) a search
    for `memory_keys_values` matches only the pages that say that name, its own section first, while
    a word (`memory`) also matches the many names that start with it (`memory_rows`), rare words that
    lunr ranks high: at 0.75 they came before every lesson. A checker's page below the package's by
    more than Material's 5:2 for a page's title over a section's: `relative_scores.py` (a checker) is
    not the first hit for `relative_scores` (the function)."""
    if not module.stem.startswith("exercises"):
        return package
    return round(package * (0.2 if module.stem.endswith("_slips") else 0.3), 4)


def _exports(tree: ast.Module) -> list[tuple[str, str]]:
    """(name, dotted path) of each class and function in an `__init__`'s `__all__` that it imports
    from a labnn module (a link each, resolved by mkdocs-autorefs: a name with no documented object
    fails the build). No `__all__`, no exports: `labnn`'s own imports are its tools, not its API."""
    paths = {m.name: m.path for m in layout.modules()}
    public = {e.value for n in tree.body if isinstance(n, ast.Assign)
              and any(getattr(x, "id", "") == "__all__" for x in n.targets)
              for e in getattr(n.value, "elts", []) if isinstance(e, ast.Constant)}
    found = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module in paths:
            source = ast.parse(paths[node.module].read_text(encoding="utf-8"))
            defined = {n.name for n in source.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
            found += [(a.name, f"{node.module}.{a.name}") for a in node.names
                      if a.name in defined and a.name in public]
    return found


def on_files(files, config):
    _code.clear()
    for module in layout.modules():
        for uri in (f"source/{module.stem}.md", f"api/{module.stem}.md"):
            existing = files.get_file_from_path(uri)
            if existing is not None:
                files.remove(existing)
        text, codes = annotated_page(module, config["repo_url"])
        _code[f"source/{module.stem}.md"] = codes
        files.append(File.generated(config, f"source/{module.stem}.md", content=text))
        files.append(File.generated(config, f"api/{module.stem}.md", content=api_page(module)))
    return files


_ARROW = re.compile(r"(<(pre|script|style|textarea)\b.*?</\2>)|(<[^>]*>)|-&gt;", re.DOTALL)


def keep_arrows(content: str) -> str:
    """`->` in prose and inline code (`[..., L] -> [..., S]`, from docstrings and notebooks) as one
    unbreakable piece: a browser may break a line after any hyphen, leaving `-` / `>` on two lines.
    Code blocks are left alone (their `->` is a Pygments token the stylesheet keeps whole)."""
    return _ARROW.sub(lambda m: m.group(1) or m.group(3) or '<span class="labnn-nowrap">-&gt;</span>', content)


def on_page_content(content, page, config, files):
    content = keep_arrows(content)  # every page
    codes = _code.get(page.file.src_uri)
    return content if codes is None else with_code(content, codes)


def with_code(content: str, codes: list[str]) -> str:
    """An annotated page's HTML with each section's highlighted code in its placeholder. The
    wrapper stays: labnn.css lays out and wraps the code by it (.ann-code)."""
    return _PLACEHOLDER.sub(lambda m: f'<div class="ann-code">{codes[int(m.group(1))]}</div>', content)


_DIV = re.compile(r"</?div\b[^>]*>")


def for_search(content: str) -> str:
    """What the search plugin indexes of an annotated page: its HTML without its `<div>`s.

    Material's indexer closes a heading's section when the element that holds the heading closes,
    and gives what follows back to the page's own entry. A heading here sits in its note
    (`div.ann-note`), beside the code (`div.ann-code`) and before the sections a comment starts, so
    every code block and note went to the page's top entry: a search for `forward` led to the top
    of the page. Without the divs each heading is a sibling of all that follows it up to the next
    heading, which the indexer gives to that heading's entry and anchor. The page itself keeps its
    markup: a heading outside its note would not be beside the code (labnn.css), and the search
    plugin has no option for sections. The annotated pages' divs are only the layout's (`ann*`),
    `highlight` and `arithmatex`: none carries `data-search-exclude`."""
    return _DIV.sub("", content)


@event_priority(50)  # before the search plugin (priority 0) indexes page.content; search_text.py restores it
def on_page_context(context, page, config, nav):
    """An annotated page (English or Chinese) indexed as `for_search` makes it, shown as it is."""
    if '<div class="ann">' in page.content:
        page.labnn_content = page.content
        page.content = for_search(page.content)
    return context
