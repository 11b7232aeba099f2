// labnn site behaviour that no Material option or maintained plugin provides without a cost here:
// * a click on a notebook figure opens it at full size over the page (Escape or a click closes it).
//   mkdocs-glightbox would copy each figure's base64 data into a link (pages twice as heavy);
// * opened from disk (file://), links to folders point at their index.html and the search box says it
//   needs a server. Material's offline plugin would do this by changing every page URL (the notebooks
//   link to the published ones) and by loading a script from unpkg.com (the site makes no outside request).
(function () {
  function zoom(img) {
    var overlay = document.createElement("div");
    overlay.className = "labnn-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-label", "Full-size figure (click or Escape to close)");
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    overlay.appendChild(big);
    function close() {
      overlay.remove();
      document.removeEventListener("keydown", onKey);
    }
    function onKey(event) { if (event.key === "Escape") close(); }
    overlay.addEventListener("click", close);
    document.addEventListener("keydown", onKey);
    document.body.appendChild(overlay);
  }
  document.addEventListener("click", function (event) {
    var img = event.target.closest && event.target.closest(".jupyter-wrapper .jp-RenderedImage img");
    if (img) zoom(img);
  });

  if (location.protocol !== "file:") return;
  document.querySelectorAll("a[href]").forEach(function (a) {
    var href = a.getAttribute("href");
    if (/^[a-z][a-z0-9+.-]*:/i.test(href) || href.charAt(0) === "#") return;
    var parts = href.split("#");
    if (parts[0] === "" || parts[0].slice(-1) === "/" || parts[0] === ".") {
      parts[0] = (parts[0] === "." ? "./" : parts[0]) + "index.html";
      a.setAttribute("href", parts.join("#"));
    }
  });
  var search = document.querySelector(".md-search");
  if (search) {
    var note = document.createElement("span");
    note.className = "labnn-offline-note";
    note.textContent = "Search needs a web server: python -m http.server -d site";
    search.replaceWith(note);
  }
})();
