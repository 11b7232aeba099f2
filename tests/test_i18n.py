"""The Chinese (zh) catalogs: complete and fresh for the pages in scope, terms as the glossary says, and
math, code, links and HTML of the English kept as they are. No site build: docs/hooks/i18n.py reads the
English sources (notebook cells, annotated-source notes, docs/index.md) and docs/locale/zh/*.po.

A failure of `test_catalogs_complete_and_fresh` after an English edit is the point: run
`make translations` (or `python docs/hooks/i18n.py update`) and translate what it lists.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("polib", reason="polib reads the catalogs (test and docs extras)")
pytest.importorskip("mkdocs", reason="the site hooks need mkdocs (docs extra)")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import i18n  # noqa: E402

PAGES = i18n.page_entries()


def load_glossary(path: Path = i18n.LOCALE / "glossary.tsv") -> list[dict]:
    """Rows of glossary.tsv: english, accepted (|), forbidden (|), checked (yes: the English term in an
    entry needs one accepted rendering in its Chinese)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            cols = (line.split("\t") + ["", "", "", ""])[:4]
            rows.append({"english": cols[0].strip(), "accepted": [a for a in cols[1].split("|") if a.strip()],
                         "forbidden": [f for f in cols[2].split("|") if f.strip()],
                         "checked": cols[3].strip() == "yes"})
    return rows


GLOSSARY = load_glossary()


def _entries():
    for page, entries in PAGES.items():
        done = i18n.translations(page)
        for entry in entries:  # a stale translation is checked once it is redone (the test above fails)
            source, chinese = done.get(entry.key, (None, ""))
            current = source is not None and i18n.same_text(source, entry.english)
            yield pytest.param(page, entry, chinese if current else "", id=entry.key)


ENTRIES = list(_entries())


def test_catalogs_complete_and_fresh():
    report = i18n.status(PAGES)
    assert set(report) == {"index", *(f"notebooks/{s}" for s in i18n.NOTEBOOKS),
                           *(f"source/{s}" for s in i18n.MODULES)}
    bad = {page: r for page, r in report.items() if r["missing"] or r["stale"] or r["obsolete"]}
    assert not bad, "translations to do (make translations):\n" + i18n.format_status(bad)


def test_every_markdown_cell_of_the_notebooks_is_an_entry():
    for stem in i18n.NOTEBOOKS:
        cells = json.loads((ROOT / "notebooks" / f"{stem}.ipynb").read_text(encoding="utf-8"))["cells"]
        ids = {f"{stem}.ipynb#{c['id']}" for c in cells if c["cell_type"] == "markdown"}
        assert ids and ids == {e.key for e in PAGES[f"notebooks/{stem}"]}


def _modified_copy(tmp_path: Path, stem: str, edit) -> Path:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    for path in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(path, folder / path.name)
    path = folder / f"{stem}.ipynb"
    nb = json.loads(path.read_text(encoding="utf-8"))
    edit(nb["cells"])
    path.write_text(json.dumps(nb), encoding="utf-8")
    return folder


def _second_markdown(cells) -> dict:
    return [c for c in cells if c["cell_type"] == "markdown"][1]


def test_changed_english_cell_is_reported_stale(tmp_path):
    """An English cell edited after its translation: status names that cell (and only it) stale."""
    stem = "03_feedback_transformer"

    def edit(cells):
        cell = _second_markdown(cells)
        cell["source"] = "".join(cell["source"]).replace("Two consequences", "Two consequences follow") \
            .splitlines(keepends=True)

    folder = _modified_copy(tmp_path, stem, edit)
    cell_id = _second_markdown(json.loads((folder / f"{stem}.ipynb").read_text())["cells"])["id"]
    report = i18n.status(i18n.page_entries(notebooks_dir=folder))
    assert report[f"notebooks/{stem}"]["stale"] == [f"{stem}.ipynb#{cell_id}"]
    assert report[f"notebooks/{stem}"]["missing"] == []
    assert "stale: 03_feedback_transformer.ipynb#" + cell_id in i18n.format_status(report)


def test_new_cell_is_missing_and_update_writes_it(tmp_path):
    """A new English cell is missing; `update` writes it with an empty msgstr, and a changed one fuzzy with
    the English it was translated from as `#| msgid`, keeping its Chinese for the translator."""
    stem = "04_kv_sharing_stack"

    def edit(cells):
        _second_markdown(cells)["source"] = ["## 1. Changed heading\n"]
        cells.insert(len(cells), {"cell_type": "markdown", "id": "brandnew1", "metadata": {}, "source": ["A new cell."]})

    folder = _modified_copy(tmp_path, stem, edit)
    locale = tmp_path / "locale"
    shutil.copytree(i18n.LOCALE, locale)
    pages = i18n.page_entries(notebooks_dir=folder)
    report = i18n.status(pages, locale)[f"notebooks/{stem}"]
    assert report["missing"] == [f"{stem}.ipynb#brandnew1"]
    assert len(report["stale"]) == 1
    i18n.update(pages, locale)
    po = (locale / "notebooks" / f"{stem}.po").read_text(encoding="utf-8")
    assert f'msgctxt "{stem}.ipynb#brandnew1"\nmsgid "A new cell."\nmsgstr ""' in po
    assert '#, fuzzy\n#| msgid ""\n#| "## 1. One projection' in po
    fuzzy = [e for e in i18n.read_catalog(locale / "notebooks" / f"{stem}.po") if "fuzzy" in e.flags]
    assert len(fuzzy) == 1 and fuzzy[0].previous_msgid.startswith("## 1. One projection of the memory")
    assert fuzzy[0].msgid == "## 1. Changed heading\n" and fuzzy[0].msgstr.startswith("## 1. 记忆只投影一次")
    after = i18n.status(pages, locale)[f"notebooks/{stem}"]
    assert after["missing"] == [f"{stem}.ipynb#brandnew1"] and after["stale"] == report["stale"]


def test_status_command_lists_what_needs_translating(tmp_path):
    result = subprocess.run([sys.executable, str(ROOT / "docs" / "hooks" / "i18n.py"), "status"],
                            capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "notebooks/03_feedback_transformer:" in result.stdout
    assert result.returncode == (0 if "missing:" not in result.stdout and "stale:" not in result.stdout else 1)


# ---------------------------------------------------------------------------- what a translation keeps

_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_DISPLAY = re.compile(r"\$\$.*?\$\$", re.S)
_INLINE = re.compile(r"(?<!\$)\$(?!\$)[^$]+?\$")
_CODE = re.compile(r"`(?:[^`\n]|\n(?!\s*\n))+`")  # a span may wrap to the next line of its paragraph
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_TAG = re.compile(r"</?(details|summary|div|span|br|img|a)\b[^>]*>")
_INDENTED = re.compile(r"^(?: {4}|\t)(?![*-] ).*\S.*$", re.M)


def _pieces(text: str) -> dict[str, list[str]]:
    fences = _FENCE.findall(text)
    rest = _FENCE.sub(" ", text)
    display = _DISPLAY.findall(rest)
    rest = _DISPLAY.sub(" ", rest)
    return {"code block": fences, "display math": display, "inline math": _INLINE.findall(rest),
            "inline code": _CODE.findall(_INLINE.sub(" ", rest)), "link target": _LINK.findall(rest),
            "HTML tag": _TAG.findall(rest)}


def _prose(text: str) -> str:
    """What is translated: the text without code, math, link targets, HTML and URLs."""
    text = _FENCE.sub(" ", text)
    text = _INDENTED.sub(" ", text)
    text = _DISPLAY.sub(" ", text)
    text = _INLINE.sub(" ", text)
    text = _CODE.sub(" ", text)
    text = _LINK.sub("]", text)
    text = re.sub(r"<[^>]+>", " ", text)
    return re.sub(r"https?://\S+", " ", text)


@pytest.mark.parametrize("page, entry, chinese", ENTRIES)
def test_math_code_links_and_html_kept(page, entry, chinese):
    """Every `$...$`/`$$...$$` segment, backticked span, link target, code block and HTML tag of the
    English is in the Chinese unchanged; headings and <details> boxes keep their number."""
    if not chinese.strip():
        pytest.skip("not translated or stale (test_catalogs_complete_and_fresh reports it)")
    english, translated = _pieces(entry.english), _pieces(chinese)
    flat = " ".join(chinese.split())  # line wrapping aside (a span the English wraps may be on one line)
    problems = []
    for kind, found in english.items():
        for piece in found:
            if kind == "HTML tag" and piece.startswith("</"):
                continue
            kept = [" ".join(p.split()) for p in translated[kind]] if kind != "inline code" else [flat]
            if not any(" ".join(piece.split()) in k if kind == "inline code" else " ".join(piece.split()) == k
                       for k in kept):
                problems.append(f"{kind} {piece!r} is not in the Chinese")
    if sorted(english["HTML tag"]) != sorted(translated["HTML tag"]):
        problems.append(f"HTML tags differ: {english['HTML tag']} vs {translated['HTML tag']}")
    heads = [len(re.findall(r"^#{1,6} ", _FENCE.sub("", t), re.M)) for t in (entry.english, chinese)]
    if heads[0] != heads[1]:
        problems.append(f"{heads[0]} headings in the English, {heads[1]} in the Chinese")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page, entry, chinese", ENTRIES)
def test_glossary_terms(page, entry, chinese):
    """No forbidden rendering (变压器, 代币, 令牌, ...); a checked English term present in the English prose has
    an accepted rendering in the Chinese prose of the same entry."""
    if not chinese.strip():
        pytest.skip("not translated")
    english, translated = _prose(entry.english), _prose(chinese)
    problems = [f"forbidden {f!r} for {row['english']!r}" for row in GLOSSARY for f in row["forbidden"]
                if f in translated]
    for row in GLOSSARY:
        if not row["checked"]:
            continue
        term = re.escape(row["english"]).replace(r"\ ", r"[\s-]+")
        if re.search(rf"(?<![\w-]){term}(?:s|es)?(?![\w-])", english, flags=re.I) \
                and not any(a in translated for a in row["accepted"]):
            problems.append(f"{row['english']!r} in the English, none of {row['accepted']} in the Chinese")
    assert not problems, "\n".join(problems)


def test_glossary_has_the_issue_terms():
    terms = {row["english"]: row for row in GLOSSARY}
    for name in ("Transformer", "Transformer-XL", "Feedback Transformer"):
        assert terms[name]["accepted"] == [name]
    for english, chinese in [("attention", "注意力"), ("query", "查询"), ("key", "键"), ("value", "值"),
                             ("memory", "记忆"), ("token", "词元"), ("layer", "层"), ("gradient", "梯度"),
                             ("autograd", "自动求导")]:
        assert chinese in terms[english]["accepted"], english
    assert {"代币", "令牌"} <= set(terms["token"]["forbidden"])
    assert "变压器" in terms["Transformer"]["forbidden"]


def test_glossary_rule_catches_a_bad_translation():
    """The rule itself: 'token' rendered as 代币 fails, 'attention' left out fails."""
    entry = i18n.Entry("x", "Each token attends to the memory.")
    with pytest.raises(AssertionError, match="forbidden '代币'"):
        test_glossary_terms("p", entry, "每个代币都关注记忆中的注意力。")
    with pytest.raises(AssertionError, match="'token' in the English"):
        test_glossary_terms("p", i18n.Entry("x", "One token."), "一个符号。")
    test_glossary_terms("p", entry, "每个词元都用注意力读取记忆。")


def test_links_of_a_chinese_page_reach_a_page():
    """A link of a page moved under zh/ goes to the Chinese page if there is one, else to the English page
    one folder up, （英文） after its text; a link to the published site (site_url) the same; images move
    up a folder; anchors, other hosts and in-page links are kept."""
    zh = {"zh/index.md", "zh/notebooks/03_feedback_transformer.ipynb", "zh/source/feedback/model.md"}
    text = ("[a](notebooks/03_feedback_transformer.ipynb) [b](notebooks/01_attention.ipynb) "
            "[c](source/feedback/model.md#LayerMix) [d](api/index.md) [e](https://example.org/x.md) [f](#top) "
            "![g](assets/images/x.svg) [h（英文）](gpu.md)")
    assert i18n._retarget(text, "index.md", zh) == (
        "[a](notebooks/03_feedback_transformer.ipynb) [b（英文）](../notebooks/01_attention.ipynb) "
        "[c](source/feedback/model.md#LayerMix) [d（英文）](../api/index.md) [e](https://example.org/x.md) "
        "[f](#top) ![g](../assets/images/x.svg) [h（英文）](../gpu.md)")
    assert i18n._retarget("[api](../../api/feedback/model.md) [kv](kv.md)", "source/feedback/model.md",
                          zh) == "[api（英文）](../../../api/feedback/model.md) [kv（英文）](../../../source/feedback/kv.md)"
    site = "https://labnn.github.io/labnn/"
    text = f"[m]({site}source/feedback/model/#LayerMix) [b]({site}benchmarks/) [`x`]({site}source/nn/)"
    assert i18n._retarget(text, "notebooks/03_feedback_transformer.ipynb", zh, site) == (
        f"[m]({site}zh/source/feedback/model/#LayerMix) [b（英文）]({site}benchmarks/) "
        f"[`x`（英文）]({site}source/nn/)")


def test_markdown_blocks_keep_fenced_code_whole():
    text = "# T\n\npara one\nline two\n\n```bash\na\n\nb\n```\n\n| x |\n|---|\n"
    assert i18n.markdown_blocks(text) == ["# T", "para one\nline two", "```bash\na\n\nb\n```", "| x |\n|---|"]
    keys = [k for k, _ in i18n.markdown_entries(text, "p.md")]
    assert keys == ["p.md:t", "p.md:t+1", None, "p.md:t+3"]


def test_rewrapped_english_is_not_stale(tmp_path):
    """Line wrapping is not a change: a cell rewrapped keeps its translation, and `update` takes the new
    English as msgid without marking it fuzzy."""
    stem = "03_feedback_transformer"

    def edit(cells):
        cell = _second_markdown(cells)
        cell["source"] = "".join(cell["source"]).replace("\n", " \n ").replace("  ", " ").splitlines(keepends=True)

    folder = _modified_copy(tmp_path, stem, edit)
    locale = tmp_path / "locale"
    shutil.copytree(i18n.LOCALE, locale)
    pages = i18n.page_entries(notebooks_dir=folder)
    assert i18n.status(pages, locale)[f"notebooks/{stem}"]["stale"] == []
    i18n.update(pages, locale)
    cell = _second_markdown(json.loads((folder / f"{stem}.ipynb").read_text())["cells"])
    entry = next(e for e in i18n.read_catalog(locale / "notebooks" / f"{stem}.po") if e.msgctxt.endswith(cell["id"]))
    assert entry.msgid == "".join(cell["source"]) and "fuzzy" not in entry.flags and entry.msgstr


def test_preservation_rule_catches_a_change():
    """The rule itself: a formula, a code span or a link target that the Chinese changes or drops fails."""
    entry = i18n.Entry("x", "The score $q K^\\top$ of `attn(q, k)`, see [the page](../source/xl/model.md#relative_shift).")
    test_math_code_links_and_html_kept("p", entry, "分数 $q K^\\top$ 来自 `attn(q, k)`，见[该页](../source/xl/model.md#relative_shift)。")
    for bad, what in [("分数 $qK^T$ 来自 `attn(q, k)`，见[该页](../source/xl/model.md#relative_shift)。", "inline math"),
                      ("分数 $q K^\\top$ 来自 attn(q, k)，见[该页](../source/xl/model.md#relative_shift)。", "inline code"),
                      ("分数 $q K^\\top$ 来自 `attn(q, k)`，见[该页](../source/xl/model.md)。", "link target")]:
        with pytest.raises(AssertionError, match=what):
            test_math_code_links_and_html_kept("p", entry, bad)


# ---------------------------------------------------------------------------- one way to say one thing

# "L× smaller" has one Chinese form, 缩小为原来的 1/L (or 缩小为 X 的 1/L): "小 L 倍", "少 L 倍" or "慢 2.7×"
# read either way (is the new size L times less, or 1/L less?).
_AMBIGUOUS_RATIO = re.compile(r"(?:小|少|慢)\s*(?:\$[^$\n]*\$|`[^`\n]*`|\d+(?:\.\d+)?)\s*倍"
                              r"|(?:小|少|慢)\s*\$[^$\n]*\\times\$")
_SMALLER = re.compile(r"times (?:smaller|less|fewer)|\\times\$ (?:smaller|less)|\$1/L\$ (?:of|as)|shrinks? to")
# renderings of one English term that a notebook page must not mix (each pair: the page's term, the other one;
# in the annotated source, 顶层 is also "top-level", as in 顶层的 `kv`)
_ONE_TERM = [("Feedback 模型", "反馈模型"), ("最高层", "(?<!最)顶层"), ("最底层", "(?<!最)底层"),
             ("(?<!记忆)缓冲区", "记忆缓冲区")]
# notebook pages only: the annotated source still says 循环 for "recurrence" in places
_NOTEBOOK_TERMS = [("recurrence", "递推")]


@pytest.mark.parametrize("page, entry, chinese", ENTRIES)
def test_a_smaller_size_is_said_one_way(page, entry, chinese):
    if not chinese.strip():
        pytest.skip("not translated")
    problems = [f"ambiguous ratio {m.group(0)!r}: write 缩小为原来的 1/L" for m in _AMBIGUOUS_RATIO.finditer(chinese)]
    if _SMALLER.search(entry.english) and "缩小为" not in chinese:
        problems.append("the English says how much smaller; the Chinese needs 缩小为（原来的）1/L")
    if page.startswith("notebooks/"):
        for english, term in _NOTEBOOK_TERMS:
            if re.search(rf"\b{english}\b", _prose(entry.english)) and term not in chinese:
                problems.append(f"{english!r} is {term} here (循环 is the token loop)")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", sorted(p for p in PAGES if p.startswith("notebooks/")))
def test_a_page_keeps_one_rendering_per_term(page):
    done = i18n.translations(page)
    text = "\n".join(chinese for _, chinese in done.values())
    mixed = [f"{a!r} and {b!r}" for a, b in _ONE_TERM if re.search(a, text) and re.search(b, text)]
    assert not mixed, f"{page} mixes " + "; ".join(mixed)


def test_the_ratio_rule_catches_the_old_forms():
    for bad in ("比 Transformer 的 $2LMD$ 少 $L$ 倍", "恰好小 $L\\times$", "增长慢 $8/3 \\approx 2.7\\times$",
                "缩小 $L$ 倍", "少 `L` 倍"):
        assert _AMBIGUOUS_RATIO.search(bad), bad
    for good in ("缩小为原来的 $1/L$", "快 1.4 到 1.8 倍", "慢好多倍", "相差不超过 4 倍"):
        assert not _AMBIGUOUS_RATIO.search(good), good


def test_a_page_shows_only_a_current_translation():
    """The build's rule: an entry made from other English (stale), fuzzy (made from unknown English) or
    empty shows the English; only a translation of this very text (white space aside) is shown."""
    done = {"k": ("The memory.", "记忆。"), "fuzzy": (None, "旧的"), "empty": ("The memory.", "")}
    assert i18n._current(done, "k", "The  memory.\n") == "记忆。"
    assert i18n._current(done, "k", "The memory, changed.") == "The memory, changed."
    assert i18n._current(done, "fuzzy", "The memory.") == "The memory."
    assert i18n._current(done, "empty", "The memory.") == "The memory."
    assert i18n._current(done, "new", "A new cell.") == "A new cell."
