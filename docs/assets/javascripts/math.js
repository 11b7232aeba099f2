// Typeset math with the KaTeX served by this site (docs/assets/vendor/katex, fetched from npm at build time).
// Markdown pages and docstrings: pymdownx.arithmatex wraps math in .arithmatex as \( \) or \[ \].
// Notebook pages: nbconvert leaves the raw $...$ / $$...$$ inside .jp-MarkdownOutput (and their
// headings' raw TeX in the tables of contents: the sidebar's, and the copy in the menu on a narrow screen).
(function () {
  var options = {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "\\[", right: "\\]", display: true },
      { left: "\\(", right: "\\)", display: false },
      { left: "$", right: "$", display: false },
    ],
    throwOnError: false,
    ignoredTags: ["script", "noscript", "style", "textarea", "pre", "code", "option"],
    ignoredClasses: ["katex", "katex-display"],
  };
  function render() {
    if (typeof renderMathInElement !== "function") return;
    document.querySelectorAll(".arithmatex, .jp-MarkdownOutput, .ann-note, .md-nav--secondary .md-nav__link").forEach(function (el) {
      // One text node per run of text (the HTML parser may split a long text when the page arrives in
      // pieces, and auto-render reads one node at a time); typeset formulas are skipped (ignoredClasses),
      // so a second pass only typesets what the first one missed.
      el.normalize();
      renderMathInElement(el, options);
      el.dataset.labnnMath = "1";
    });
    glue();
  }
  // The punctuation after an inline formula stays on the formula's line: a line break is allowed
  // between a formula (an inline-block) and the text after it, and notebook 02 showed a line that
  // began with ", the pairs". A formula of 200 px at most (a phone's column holds 350) and the run of
  // punctuation after it are wrapped in one span that does not break (in a table's cell, one of 60 px
  // at most: API tables on a phone showed `w` then "." on the next line); a wider formula keeps the
  // breaks KaTeX allows inside it (at = and +). A word joiner (U+2060) between the two does not hold in
  // Chromium.
  function glue() {
    document.querySelectorAll(".md-content .katex").forEach(function (math) {
      if (math.closest(".katex-display") || math.parentElement.closest(".katex")) return;
      var after = math;  // out of the span auto-render wraps it in, and arithmatex's span.arithmatex
      while (!after.nextSibling && after.parentElement.tagName === "SPAN"
             && /^(arithmatex)?$/.test(after.parentElement.className)) after = after.parentElement;
      var next = after.nextSibling, marks = next && next.nodeType === 3 && /^[,.;:!?)\]]+/.exec(next.nodeValue);
      if (!marks) return;
      var width = 0;
      Array.prototype.forEach.call(math.getClientRects(), function (r) { width += r.width; });
      if (width > (math.closest("td, th") ? 60 : 200)) return;
      var span = document.createElement("span");
      span.className = "labnn-nowrap";
      after.replaceWith(span);
      next.nodeValue = next.nodeValue.slice(marks[0].length);
      span.append(after, marks[0]);
    });
  }
  // Once the document is parsed, and again once everything is loaded: the test of the site (and a reader
  // on a slow machine) found formulas of a long notebook page left raw by the first pass alone.
  window.addEventListener("load", render);
  if (typeof document$ !== "undefined") {
    document$.subscribe(render);
  } else {
    document.addEventListener("DOMContentLoaded", render);
  }
})();
