// Typeset math with the KaTeX served by this site (docs/assets/vendor/katex, fetched from npm at build time).
// Markdown pages and docstrings: pymdownx.arithmatex wraps math in .arithmatex as \( \) or \[ \].
// Notebook pages: nbconvert leaves the raw $...$ / $$...$$ inside .jp-MarkdownOutput (and their
// headings' raw TeX in the table of contents).
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
  };
  function render() {
    if (typeof renderMathInElement !== "function") return;
    document.querySelectorAll(".arithmatex, .jp-MarkdownOutput, .ann-note, .md-sidebar--secondary .md-nav__link").forEach(function (el) {
      if (!el.dataset.labnnMath) {
        el.dataset.labnnMath = "1";
        renderMathInElement(el, options);
      }
    });
  }
  if (typeof document$ !== "undefined") {
    document$.subscribe(render);
  } else {
    document.addEventListener("DOMContentLoaded", render);
  }
})();
