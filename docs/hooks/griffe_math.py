"""Display math in docstrings renders as such (a griffe extension, mkdocstrings' extension point).

labnn's docstrings write display math as `$$ ... $$` inside a paragraph (the way it reads in the
source): arithmatex only treats `$$` as display math when it is a block of its own, so mkdocstrings
showed the raw `$$` and squashed the formula into the line. This extension puts blank lines around
every `$$ ... $$` (keeping its indentation, so an entry of `Args:` keeps its block) before the
docstring is parsed. The annotated-source notes use the same function (annotated.py). Why an
extension: neither arithmatex nor mkdocstrings has an option to read `$$` inside a paragraph as a
display block.
"""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_DISPLAY = re.compile(r"(?s)\$\$.+?\$\$")


def isolate_display_math(text: str) -> str:
    """Put each `$$ ... $$` on lines of its own, with a blank line before and after it."""
    out: list[str] = []
    pos = 0
    for match in _DISPLAY.finditer(text):
        line_start = text.rfind("\n", 0, match.start()) + 1
        indent = re.match(r"[ \t]*", text[line_start:]).group(0)
        before = text[pos:match.start()].rstrip(" \t")
        out.append(before)
        if before and not before.endswith("\n\n"):
            out.append("\n" if before.endswith("\n") else "\n\n")
        out.append(indent + match.group(0).strip() + "\n\n")
        pos = match.end()
        rest = text[pos:]
        skipped = len(rest) - len(rest.lstrip(" \t"))
        pos += skipped
        if text[pos:pos + 1] == "\n":
            pos += 1  # the next line keeps its own indentation
        elif pos < len(text):
            out.append(indent)  # text after `$$` on the same line starts a line of its own
    out.append(text[pos:])
    result = "".join(out)
    return re.sub(r"\n{3,}", "\n\n", result).rstrip("\n") + ("\n" if text.endswith("\n") else "")


class DisplayMath(Extension):
    def on_instance(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring and "$$" in obj.docstring.value:
            obj.docstring.value = isolate_display_math(obj.docstring.value)
