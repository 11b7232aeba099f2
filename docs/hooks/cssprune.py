"""Trim a stylesheet to the rules a set of pages can use (helper of notebooks.py, not a hook).

mkdocs-jupyter ships JupyterLab's whole stylesheet (~590 KB) with every notebook page. Most of it styles
widgets, menus and editors that a static page never has, and 80 KB of it are custom properties under
`.jupyter-wrapper :root`, a selector that matches nothing. `prune` keeps a rule when one of its selectors
can match: every class and id it names (outside `:not(...)`) occurs in the pages; selectors with
`:is()`/`:where()`/`:has()` are kept as they are. `drop_unused_properties` then removes custom properties
(`--x: ...`) that no `var(--x)` reads. Screenshots of a notebook page in light and dark mode are the same
with the full and the trimmed stylesheet.
"""

from __future__ import annotations

import re

_CLASS = re.compile(r"\.(-?[_a-zA-Z][\w-]*)")
_ID = re.compile(r"#(-?[_a-zA-Z][\w-]*)")
_GROUPING = re.compile(r"@(media|supports|layer|container)\b")


def used_names(html: str) -> tuple[set[str], set[str]]:
    """Classes and ids that occur in an HTML page."""
    classes: set[str] = set()
    for value in re.findall(r'class="([^"]*)"', html):
        classes.update(value.split())
    return classes, set(re.findall(r'id="([^"]*)"', html))


def _blocks(css: str):
    """Yield (prelude, body or None) for each top-level statement of a stylesheet."""
    i, n = 0, len(css)
    start = 0
    while i < n:
        c = css[i]
        if css.startswith("/*", i):
            j = css.find("*/", i + 2)
            i = n if j < 0 else j + 2
            if css[start:i].strip().startswith("/*"):
                start = i
            continue
        if c in "\"'":
            j = i + 1
            while j < n and css[j] != c:
                j += 2 if css[j] == "\\" else 1
            i = j + 1
            continue
        if c == ";" :
            yield css[start:i + 1].strip(), None
            i += 1
            start = i
            continue
        if c == "{":
            depth, j = 1, i + 1
            while j < n and depth:
                if css.startswith("/*", j):
                    k = css.find("*/", j + 2)
                    j = n if k < 0 else k + 2
                    continue
                if css[j] in "\"'":
                    q = css[j]; j += 1
                    while j < n and css[j] != q:
                        j += 2 if css[j] == "\\" else 1
                    j += 1
                    continue
                depth += css[j] == "{"
                depth -= css[j] == "}"
                j += 1
            yield css[start:i].strip(), css[i + 1:j - 1]
            i = j
            start = i
            continue
        i += 1


def _split_selectors(prelude: str) -> list[str]:
    out, depth, cur = [], 0, ""
    for ch in prelude:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [s.strip() for s in out if s.strip()]


def _selector_used(selector: str, classes: set[str], ids: set[str]) -> bool:
    if re.search(r"\S\s*:root", selector):  # `.x :root` never matches
        return False
    if re.search(r":(is|where|has|matches|-webkit-any)\(", selector):
        return True
    plain = re.sub(r":not\((?:[^()]|\([^()]*\))*\)", "", selector)
    plain = re.sub(r"\[[^\]]*\]", "", plain)
    return all(c in classes for c in _CLASS.findall(plain)) and all(i in ids for i in _ID.findall(plain))


def prune(css: str, classes: set[str], ids: set[str]) -> str:
    out = []
    for prelude, body in _blocks(css):
        if body is None:
            if not prelude.startswith("@charset"):
                out.append(prelude)
        elif prelude.startswith("@"):
            if re.match(r"@(media|supports|layer|container)\b", prelude):
                inner = prune(body, classes, ids)
                if inner.strip():
                    out.append(f"{prelude}{{{inner}}}")
            else:
                out.append(f"{prelude}{{{body}}}")
        else:
            kept = [s for s in _split_selectors(prelude) if _selector_used(s, classes, ids)]
            rule = f"{','.join(kept)}{{{body.strip()}}}"
            if kept and rule not in out:
                out.append(rule)
    return "\n".join(out)


def _decls(body: str) -> list[str]:
    out, depth, cur, quote = [], 0, "", None
    for ch in body:
        if quote:
            cur += ch
            if ch == quote:
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == ";" and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [d for d in out if d]


def drop_unused_properties(css: str) -> str:
    """Remove custom-property declarations (--x: ...) that nothing reads through var(--x)."""
    while True:
        used = set(re.findall(r"var\(\s*(--[\w-]+)", css))
        def clean(body):
            return ";".join(d for d in _decls(body) if not d.startswith("--") or d.split(":", 1)[0].strip() in used)
        def walk(text):
            out = []
            for prelude, body in _blocks(text):
                if body is None:
                    out.append(prelude)
                elif re.match(r"@(media|supports|layer|container)\b", prelude):
                    inner = walk(body)
                    if inner.strip():
                        out.append(f"{prelude}{{{inner}}}")
                elif prelude.startswith("@"):
                    out.append(f"{prelude}{{{body}}}")
                else:
                    b = clean(body)
                    if b.strip():
                        out.append(f"{prelude}{{{b}}}")
            return "\n".join(out)
        new = walk(css)
        if new == css:
            return new
        css = new
