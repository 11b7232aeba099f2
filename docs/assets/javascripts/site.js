// labnn site behaviour that no Material option or maintained plugin provides without a cost here:
// * a click on a notebook figure (or Enter on it) opens it at full size over the page (its Close button,
//   Escape or a click closes it).
//   mkdocs-glightbox would copy each figure's base64 data into a link (pages twice as heavy);
// * text that CSS alone cannot wrap well (labnn.css wraps code at the box's edge): `<wbr>` after `_`/`.` in
//   headings and module paths, `->` and `--long-options` kept whole; a shrunk figure says a tap enlarges it;
//   "✏️ ... not solved yet" (an exception in Jupyter) marked as an exercise note, not an error;
// * opened from disk (file://), links to folders point at their index.html and the search box says it
//   needs a server. Material's offline plugin would do this by changing every page URL (the notebooks
//   link to the published ones) and by loading a script from unpkg.com (the site makes no outside request).
(function () {
  var zh = document.documentElement.lang === "zh";  // the zh pages' words for what this script adds
  // The full-size view is a modal dialog: a visible Close button (focused on opening, the only stop
  // for Tab), Escape or a click anywhere closes it, and focus goes back to the figure.
  function zoom(img) {
    var overlay = document.createElement("div"), back = img.closest("[tabindex]") || img;
    overlay.className = "labnn-zoom";
    overlay.setAttribute("role", "dialog");
    overlay.setAttribute("aria-modal", "true");
    overlay.setAttribute("aria-label", zh ? "原尺寸的图" : "Full-size figure");
    var button = document.createElement("button");
    button.type = "button";
    button.className = "labnn-zoom-close";
    button.setAttribute("aria-label", zh ? "关闭原尺寸的图" : "Close the full-size figure");
    button.textContent = zh ? "\u00d7 关闭" : "\u00d7 Close";
    var big = document.createElement("img");
    big.src = img.currentSrc || img.src;
    big.alt = img.alt;
    overlay.append(button, big);
    function close() {
      overlay.remove();
      document.removeEventListener("keydown", onKey, true);
      back.focus({preventScroll: true});
    }
    function onKey(event) {
      if (event.key === "Escape") close();
      else if (event.key === "Tab") { event.preventDefault(); button.focus(); }
    }
    overlay.addEventListener("click", close);
    document.addEventListener("keydown", onKey, true);
    document.body.appendChild(overlay);
    button.focus({preventScroll: true});
  }
  // Each line of a notebook's code cell becomes a block, as annotated.py makes each source line: a
  // line longer than the column wraps under its own indentation + 4 columns (labnn.css's one rule
  // for both), not at column 0. Pygments closes its spans at each line's end, but nbconvert leaves
  // some whitespace spans across a line break; each text piece keeps its span's class. A line's
  // leading spaces are bare text, as in annotated source (the line's lead, below, keeps them).
  // A code block of a page's own Markdown too (home, gpu, benchmarks, a docstring's example): on a
  // phone a wrapped shell line (`~/.cache/labnn/tiny_shakespeare.txt`) started at column 0 and read
  // as a command of its own.
  var blocks = ".jupyter-wrapper .jp-InputArea .highlight-ipynb pre, .md-content .highlight pre > code";
  document.querySelectorAll(blocks).forEach(function (pre) {
    if (pre.closest(".ann")) return;  // annotated.py made its code's lines; a note's example as it was
    var lines = [], line = null, text = "";
    function open() {
      line = document.createElement("span");
      line.className = "labnn-line";
      lines.push(line);
      text = "";
    }
    function add(piece, holder) {
      if (!line) open();
      if (!holder || (/^ +$/.test(piece) && !text.trim() && holder.classList.contains("w"))) {
        line.append(piece);
      } else {
        var copy = holder.cloneNode(false);
        copy.textContent = piece;
        line.appendChild(copy);
      }
      text += piece;
    }
    Array.from(pre.childNodes).forEach(function (node) {
      var holder = node.nodeType === Node.ELEMENT_NODE ? node : null;
      if (holder && holder.children.length) {  // not Pygments' own: kept whole
        if (!line) open();
        line.appendChild(holder.cloneNode(true));
        return void (text += holder.textContent);
      }
      node.textContent.split(/(?<=\n)/).forEach(function (piece) {
        if (!piece) return;
        add(piece, holder);
        if (piece.slice(-1) === "\n") {
          line.style.setProperty("--i", text.match(/^ */)[0].length + "ch");
          line = null;
        }
      });
    });
    if (line) line.style.setProperty("--i", text.match(/^ */)[0].length + "ch");
    pre.replaceChildren.apply(pre, lines);
  });
  // Long names in headings beside the code (`relative_keys`) break after `_` or `.`, not between letters;
  // an arrow `->` inside code text (einsum strings) never splits into `-` / `>`.
  function eachText(selector, test, change) {
    document.querySelectorAll(selector).forEach(function (root) {
      var walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT), nodes = [];
      while (walker.nextNode()) if (test.test(walker.currentNode.nodeValue)) nodes.push(walker.currentNode);
      nodes.forEach(change);
    });
  }
  function split(node, pattern, wrap) {
    var parts = node.nodeValue.split(pattern), frag = document.createDocumentFragment();
    parts.forEach(function (part, i) {
      frag.appendChild(i % 2 ? wrap(part) : document.createTextNode(part));
    });
    node.replaceWith(frag);
  }
  function breakAfter(selector, marks, className) {
    eachText(selector, new RegExp("\\w[" + marks + "]\\w"), function (node) {
      split(node, new RegExp("([" + marks + "])(?=\\w)"), function (mark) {
        var f = document.createDocumentFragment(), wbr = document.createElement("wbr");
        if (className) wbr.className = className;
        f.append(mark, wbr);
        return f;
      });
    });
  }
  // in a signature heading, only the object's own name: a parameter wraps whole (d_model, not d_ / model)
  breakAfter(".ann-note :is(h2, h3), .doc-heading code > .n:first-child", "_.");
  // module paths: labnn.feedback.kv (in a table: below)
  breakAfter("pre .nn, .md-typeset :not(pre) > code:not(:is(td, th) code)", ".");
  // a path or URL in a page's code block: after a `/` (gpu/'s index URL read `.../whl/cu12` over `8`)
  breakAfter(".md-content .labnn-line", "/");
  // code in a table: `TransformerLM(attn_len=W)` may wrap after `.`, `(`, `_`, `=`, `,`, never inside
  // a word; only in a table too narrow for its names (labnn.css): at 1400 px `shared_kv` read
  // `shared_` / `kv`, and the home page's package column `labnn.` / `transformer`
  breakAfter(".md-content :is(td, th) code", "._(=,\\[", "labnn-cell-break");
  // A page title that is a file's path (annotated source: `labnn/feedback/stack.py`) breaks after a
  // `/` or `_`, never inside its file name's `.py`: a phone showed `labnn/feedback/stack.` / `py`
  // (a <wbr> breaks even inside white-space: nowrap: the name is rebuilt without them).
  document.querySelectorAll(".md-content h1 code").forEach(function (code) {
    var m = /^(.*[\/_])(\w*\w\.(?:py|ipynb|md))$/.exec(code.textContent);
    if (code.querySelector(":not(wbr)") || !m) return;  // after breakAfter's <wbr>
    code.textContent = "";
    m[1].split(/(?<=[\/_])/).forEach(function (part) {
      code.append(part, document.createElement("wbr"));
    });
    var name = document.createElement("span");
    name.className = "labnn-nowrap";
    name.textContent = m[2];
    code.appendChild(name);
  });
  // An output printed in columns (a line with two runs of spaces between words) keeps its lines whole
  // and scrolls sideways in its own box: wrapped on a phone, its numbers fell under the wrong headings.
  // Its lines of prose (a claim's verdict printed under a table) still wrap, each in its own span:
  // kept whole, a verdict ran thousands of pixels off the screen. Before the spans that keep `->` and
  // options whole below: an output holding them would pass for coloured, and its prose stay whole.
  var columns = /\S {2,}\S.*\S {2,}\S/;
  document.querySelectorAll(".jupyter-wrapper .jp-OutputArea-output pre").forEach(function (pre) {
    if (!columns.test(pre.textContent)) return;
    pre.classList.add("labnn-columns");
    if (pre.children.length) return;  // coloured output: left whole
    var lines = pre.textContent.split("\n");
    pre.textContent = "";
    lines.forEach(function (line, i) {
      var text = i < lines.length - 1 ? line + "\n" : line;
      if (columns.test(line)) return pre.appendChild(document.createTextNode(text));
      var prose = document.createElement("span");
      prose.className = "labnn-prose-line";
      prose.textContent = text;
      pre.appendChild(prose);
    });
  });
  // A code block of plain text in columns (a docstring's table: two lines with a run of spaces
  // between their words) keeps its lines whole on a phone and scrolls in its box (labnn.css).
  // Plain text only, no lexer's tokens: in code (annotated source, gpu/'s `make test-gpu    # 570 s`)
  // a run of spaces before a comment is no column, and a line wraps under its indentation.
  document.querySelectorAll(".md-content .highlight > pre").forEach(function (pre) {
    if (pre.closest(".ann-code") || pre.querySelector("code [class]:not(.labnn-line)")) return;
    var rows = pre.textContent.split("\n").filter(function (l) { return /\S {2,}\S/.test(l.trim()); });
    if (rows.length >= 2) pre.classList.add("labnn-columns");
  });
  // A command-line option (`--batch-size`, `--wheels`, in a shell block, a string or code within
  // prose, after a space, a quote or a bracket) wraps whole, not after a hyphen: the GPU page's
  // `.ci/test-gpu --wheels` read "-" / "-wheels" at a line's end.
  // An option that starts a line keeps that line's indentation with it: wrapped apart, the spaces
  // made a line of their own (notebook 05's nbconvert command on a phone).
  var option = /((?:(?:^|(?<=\n)) +|^|(?<=[\s"'(\[]))(?:--[A-Za-z][\w-]*|-[A-Za-z]\w*-[\w-]+))/;
  eachText(".md-content pre, .md-typeset :not(pre) > code", option, function (node) {
    split(node, option, function (text) {
      var span = document.createElement("span");
      span.className = "labnn-nowrap";
      span.textContent = text;
      return span;
    });
  });
  eachText(".md-content pre", /->/, function (node) {
    if (node.nodeValue === "->") return node.parentElement.classList.add("labnn-nowrap");
    split(node, /(->)/, function (arrow) {
      var span = document.createElement("span");
      span.className = "labnn-nowrap";
      span.textContent = arrow;
      return span;
    });
  });
  // A closing mark (`,` `)` `]` `}` `:` `;`) stays on the line of the character before it: code
  // wraps after punctuation (labnn.css) and inside a token too long for the line, and at 390 px
  // `"labnn.feedback.kv.KVState",` left its `,` alone on a line (source/training/plain_data), and
  // `{str(dtype)[6:]}` its `}`. That character and the marks become one span that does not wrap;
  // a copy of the code is still the code. Before the line leads below, which take whole tokens.
  var closer = /[,;:)\]}]/, blank = /[\s\u200b]/, indented = ".md-content pre:not(.jp-OutputArea-output pre)";
  document.querySelectorAll(indented).forEach(function (pre) {
    var walker = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT), at = [], text = "", runs = [], end = -1;
    while (walker.nextNode())
      for (var k = 0; k < walker.currentNode.nodeValue.length; k++) at.push([walker.currentNode, k]);
    at.forEach(function (p) { text += p[0].nodeValue[p[1]]; });
    for (var i = 1; i < text.length; i++) {
      // after one space, with the token before it (a slice `[self.dim :]` left `:])` at a line's start)
      var e = text[i - 1] === " " && i > 1 && !blank.test(text[i - 2]) ? i - 2 : i - 1;
      if (!closer.test(text[i]) || closer.test(text[i - 1]) || blank.test(text[e])) continue;
      var j = i, h = e;
      while (j + 1 < text.length && closer.test(text[j + 1])) j++;
      if (e <= end) {  // the space follows a run of closing marks: that run takes this one too
        runs[runs.length - 1][1] = at[j];
        end = j;
        continue;
      }
      // with the rest of its token after a `.`, `_`, `/` (up to 12 characters): a string too long for
      // the line then breaks at its last dot, not before its closing quote (`"labnn.data.` / `Vocab",`)
      while (h > end + 1 && i - h < 12 && at[h - 1][0] === at[e][0]
             && !/[\s\u200b._\/,;:)\]}-]/.test(text[h - 1])) h--;
      runs.push([at[h], at[j]]);
      end = j;
    }
    runs.reverse().forEach(function (run) {  // from the end: the offsets of earlier runs stay valid
      var range = document.createRange(), glue = document.createElement("span"), cut = run[0][0];
      range.setStart(cut, run[0][1]);
      range.setEnd(run[1][0], run[1][1] + 1);
      glue.className = "labnn-glue";
      glue.appendChild(range.extractContents());
      range.insertNode(glue);
      // a token cut in two keeps no break after its first part (labnn.css), one left empty goes
      if (cut.nodeValue) cut.parentElement.classList.add("labnn-cut");
      [cut, run[1][0]].forEach(function (node) {
        var parent = node.parentElement;
        if (node.nodeValue || !parent) return;
        node.remove();
        if (parent !== pre && !parent.firstChild && !/ann-|labnn-line/.test(parent.className)) parent.remove();
      });
    });
  });
  // A code line's indentation and first token stay on one line (labnn.css): a string longer than
  // the line (source/training/plain_data's "labnn.training.config.TrainConfig") wrapped apart from
  // them, and left four spaces alone beside an annotated line's number (labnn.css draws it, out of
  // the line's flow); notebook 05's docstring `"""`labnn.training...` left its four spaces alone on
  // a line and started at column 0.
  document.querySelectorAll(".ann-code .ann-line, .labnn-line").forEach(function (line) {
    var parts = [], next = line.firstChild;
    var spaces = next && next.nodeType === Node.TEXT_NODE && /^ +$/.test(next.nodeValue) ? next : null;
    if (spaces) {
      parts.push(next);
      next = next.nextSibling;
    }
    if (!next || next.nodeType !== Node.ELEMENT_NODE || !parts.length) return;
    parts.push(next);
    var lead = document.createElement("span");
    lead.className = "labnn-lead";
    parts[0].before(lead);
    lead.append.apply(lead, parts);
  });
  // A deep indentation (9 columns or more) in a code block not cut into lines (an annotated note's
  // example, its columns aligned) is one span: on a phone labnn.css caps its width, and the line's
  // first word stays beside it, not under a line of spaces. The spaces themselves are kept: a copy
  // of the code is the code. Not in outputs: their columns stay aligned.
  eachText(indented, /(^|\n) {9,}/, function (node) {
    // labnn.css indents these, and a block in columns keeps its indentation whole
    if (node.parentElement.closest(".ann-line, .labnn-line, .labnn-columns")) return;
    split(node, /((?:^|(?<=\n)) {9,})/, function (spaces) {
      var span = document.createElement("span");
      span.className = "labnn-indent";
      span.textContent = spaces;
      return span;
    });
  });
  // A number in a table keeps its unit, a range its two ends, on one row (outside code): a phone
  // showed `487` / `ms` and `248–` / `254` / `ms` in the benchmarks' tables.
  var unit = /(\d[\d,.]*(?:[–-]\d[\d,.]*)?\s(?:ms|µs|s|min|MiB|KiB|GiB|MB|GB|%)(?!\w))/;
  eachText(".md-content td", unit, function (node) {
    if (node.parentElement.closest("code, .katex")) return;
    split(node, unit, function (text) {
      var span = document.createElement("span");
      span.className = "labnn-nowrap";
      span.textContent = text;
      return span;
    });
  });
  // Code in a table keeps its names whole (labnn.css); a table that whole names make wider than its
  // column (on a phone) is marked: it scrolls sideways in its box, and its cells of prose (five words
  // or more) keep a readable width. Measured again when the width changes.
  function fitTables() {
    document.querySelectorAll(".md-content table").forEach(function (table) {
      table.removeAttribute("data-labnn-tight");
      table.removeAttribute("data-labnn-breaks");
      var box = table.closest(".md-typeset__scrollwrap") || table.parentElement;
      var over = function () {
        return table.scrollWidth > table.clientWidth + 1 || box.scrollWidth > box.clientWidth + 1
          || table.getBoundingClientRect().right > box.getBoundingClientRect().right + 1
          || table.getBoundingClientRect().right > document.documentElement.clientWidth + 1;
      };
      if (!over()) return;
      // first its code's breaks after `_`, `(`, `=`, `,` (labnn.css hides them in a table with room)
      table.setAttribute("data-labnn-breaks", "");
      if (!over()) return;
      table.setAttribute("data-labnn-tight", "");
      table.querySelectorAll("td").forEach(function (cell) {
        if (cell.textContent.trim().split(/\s+/).length >= 5) cell.setAttribute("data-labnn-prose", "");
      });
    });
  }
  fitTables();
  window.addEventListener("load", fitTables);
  window.addEventListener("resize", fitTables);
  document.addEventListener("toggle", fitTables, true);  // a table in a hint opened
  // An exercise not solved yet (labnn.exercises raises ExerciseNotDone, which Jupyter shows as an
  // error) is a note on the page, not a pink error box; any other error keeps its colour.
  document.querySelectorAll(".jp-OutputArea-output[data-mime-type$='stderr']").forEach(function (out) {
    if (/^\s*\u270f\ufe0f?/.test(out.textContent)) out.classList.add("labnn-exercise-note");
  });
  // A figure is shown at 70 % of its drawn size at least (its labels ~9 px, as test_site.py calls
  // readable): on a phone, shrunk to the column, its ticks and labels were 5 px. Wider than the column,
  // it scrolls sideways in a box of its own, faded at the edge that hides more; shown smaller than
  // drawn, it says that a click shows it full size (the caption stays in view below the box).
  function edges(box) {
    box.toggleAttribute("data-labnn-more-left", box.scrollLeft > 1);
    box.toggleAttribute("data-labnn-more-right", box.scrollLeft + box.clientWidth < box.scrollWidth - 1);
  }
  function fitFigures() {
    document.querySelectorAll(".jupyter-wrapper .jp-RenderedImage img").forEach(function (img) {
      var output = img.closest(".jp-RenderedImage"), box = img.parentElement;
      if (!box.classList.contains("labnn-figure")) {
        box = document.createElement("div");
        box.className = "labnn-figure";
        img.replaceWith(box);
        box.appendChild(img);
        box.addEventListener("scroll", function () { edges(box); }, {passive: true});
      }
      if (img.naturalWidth) img.style.minWidth = Math.ceil(0.7 * img.naturalWidth) + "px";
      output.classList.toggle("labnn-shrunk", img.naturalWidth > img.clientWidth + 1);
      output.classList.toggle("labnn-wide", box.scrollWidth > box.clientWidth + 1);
      edges(box);
    });
  }
  fitFigures();
  window.addEventListener("load", fitFigures);
  window.addEventListener("resize", fitFigures);
  document.addEventListener("click", function (event) {
    var img = event.target.closest && event.target.closest(".jupyter-wrapper .jp-RenderedImage img");
    if (img) zoom(img);
  });
  document.addEventListener("keydown", function (event) {  // the figure's output takes focus (Tab)
    var out = event.target.closest && event.target.closest(".jupyter-wrapper .jp-RenderedImage");
    var img = out && out.querySelector("img");
    if (img && (event.key === "Enter" || event.key === " ")) { event.preventDefault(); zoom(img); }
  });

  // On a phone a name longer than a code line's row breaks after `_`, `.`, `/`, `=`, `(`, `{`, `[`
  // or `,`, or between the words of a CamelCase name, not between two letters: at 390 px 351 names
  // broke so on 109 pages (`scaled_dot_product_at` / `tention`). Only such a name: a shorter one
  // still moves to the next row whole. Not in a block in columns (it scrolls) nor inside an option
  // kept whole. labnn.css hides these <wbr> on wider screens (laid out as before).
  if (window.matchMedia("(max-width: 44.9375em)").matches) {
    var inName = /(?<=[_./=(,{\[])(?=\w)|(?<=[a-z])(?=[A-Z])/;
    function wbr() {
      return Object.assign(document.createElement("wbr"), {className: "labnn-code-break"});
    }
    document.querySelectorAll(".md-content pre").forEach(function (pre) {
      var lines = pre.querySelectorAll(".labnn-line, .ann-line"), probe, ch;
      if (!lines.length || pre.matches(".labnn-columns") || !/\S{12,}/.test(pre.textContent)) return;
      probe = document.createElement("span");
      probe.textContent = "0000000000";
      lines[0].append(probe);
      ch = probe.getBoundingClientRect().width / 10;
      probe.remove();
      lines.forEach(function (line) {
        var room = (line.clientWidth - parseFloat(getComputedStyle(line).paddingLeft)) / ch;
        if (!ch || !new RegExp("\\S{" + Math.floor(room + 1) + ",}").test(line.textContent)) return;
        var walker = document.createTreeWalker(line, NodeFilter.SHOW_TEXT), nodes = [];
        while (walker.nextNode()) {
          if (!walker.currentNode.parentElement.closest(".labnn-nowrap")) nodes.push(walker.currentNode);
        }
        nodes.forEach(function (node) {
          var runs = node.nodeValue.split(/(\s+)/);
          if (!runs.some(function (run) { return run.length > room && inName.test(run); })) return;
          var frag = document.createDocumentFragment();
          runs.forEach(function (run) {
            if (run.length <= room) return void frag.appendChild(document.createTextNode(run));
            run.split(inName).forEach(function (part, i) {
              if (i) frag.appendChild(wbr());
              frag.appendChild(document.createTextNode(part));
            });
            if (/[_./=(,{\[]$/.test(run)) frag.appendChild(wbr());  // `algorithms(` + `{state}`
          });
          node.replaceWith(frag);
        });
      });
    });
  }

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
    note.textContent = (zh ? "搜索需要一个网页服务器：" : "Search needs a web server: ")
      + "python -m http.server -d site";
    search.replaceWith(note);
  }
})();
