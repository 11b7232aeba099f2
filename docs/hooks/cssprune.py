"""Trim a stylesheet to the rules a set of pages can use (helper of notebooks.py, not a hook).

mkdocs-jupyter ships JupyterLab's whole stylesheet (~590 KB) with every notebook page. Most of it
styles widgets, menus and editors that a static page never has, and 80 KB of it are custom
properties under `.jupyter-wrapper :root`, a selector that matches nothing. `prune` keeps a rule
when one of its selectors can match: every class and id it names (outside `:not(...)`) occurs in the
pages; selectors with `:is()`/`:where()`/`:has()` are kept as they are. Screenshots of a notebook
page in light and dark mode are the same with the full and the trimmed stylesheet. tinycss2
(nbconvert's own CSS parser) reads the stylesheet. Why not a maintained tool: PurgeCSS and its kin
run on Node, which the build does not need otherwise, and mkdocs-jupyter has no option to leave its
CSS out.
"""

from __future__ import annotations

import re

import tinycss2

_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
_ID = re.compile(r"#(-?[_a-zA-Z][\w-]*)")
_GROUPING = ("media", "supports", "layer", "container")


def used_names(html: str) -> tuple[set[str], set[str]]:
    """Classes and ids that occur in an HTML page."""
    classes: set[str] = set()
    for value in re.findall(r'class="([^"]*)"', html):
        classes.update(value.split())
    return classes, set(re.findall(r'id="([^"]*)"', html))


def _selectors(prelude: list) -> list[str]:
    """A rule's selectors: its prelude split at the commas outside parentheses."""
    parts: list[list] = [[]]
    for token in prelude:
        if token.type == "literal" and token.value == ",":
            parts.append([])
        else:
            parts[-1].append(token)
    return [text for text in (tinycss2.serialize(p).strip() for p in parts) if text]


def _selector_used(selector: str, classes: set[str], ids: set[str]) -> bool:
    if re.search(r"\S\s*:root", selector):  # `.x :root` never matches
        return False
    if re.search(r":(is|where|has|matches|-webkit-any)\(", selector):
        return True
    plain = re.sub(r":not\((?:[^()]|\([^()]*\))*\)", "", selector)
    plain = re.sub(r"\[[^\]]*\]", "", plain)
    return set(_CLASS.findall(plain)) <= classes and set(_ID.findall(plain)) <= ids


def prune(css: str, classes: set[str], ids: set[str]) -> str:
    """The rules of `css` whose selectors can match the pages (see the module docstring)."""
    out: list[str] = []
    for rule in tinycss2.parse_stylesheet(css, skip_comments=True, skip_whitespace=True):
        if rule.type == "qualified-rule":
            kept = [s for s in _selectors(rule.prelude) if _selector_used(s, classes, ids)]
            text = f"{','.join(kept)}{{{tinycss2.serialize(rule.content).strip()}}}"
            if kept and text not in out:
                out.append(text)
        elif rule.type == "at-rule" and rule.lower_at_keyword in _GROUPING and rule.content:
            inner = prune(tinycss2.serialize(rule.content), classes, ids)
            if inner.strip():
                out.append(f"@{rule.at_keyword}{tinycss2.serialize(rule.prelude)}{{{inner}}}")
        elif rule.type == "at-rule" and rule.lower_at_keyword != "charset":
            out.append(rule.serialize())
    return "\n".join(out)
