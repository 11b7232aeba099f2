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
