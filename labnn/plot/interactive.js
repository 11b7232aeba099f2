// labnn.plot.interactive: draws one figure from its JSON (panels of cells, one frame per slider
// position) as inline SVG. No library, no request: the figure carries its data. Colours follow the
// page's text colour (currentColor), so the figure reads on a light and on a dark background.
(function (root) {
  if (!root || root.getAttribute("data-drawn")) return;
  root.setAttribute("data-drawn", "1");
  var spec = JSON.parse(root.querySelector("script[type='application/json']").textContent);
  var box = root.querySelector("[data-role=svg]"), cap = root.querySelector("[data-role=caption]");
  var slider = root.querySelector("input[type=range]"), out = root.querySelector("output");
  var NS = "http://www.w3.org/2000/svg", FILL = "#5c6bc0", MARK = "#f57c00", LW = 0, DARK = false;

  function add(parent, tag, attrs, text) {
    var e = document.createElementNS(NS, tag);
    for (var a in attrs) e.setAttribute(a, attrs[a]);
    if (text !== undefined) e.textContent = text;
    parent.appendChild(e);
    return e;
  }

  function longest(labels) {
    return labels.reduce(function (n, s) { return Math.max(n, String(s).length); }, 0);
  }

  function panel(svg, p, i, f, width, y) {
    var values = (f.values && f.values[i]) || p.values, marked = (f.hl && f.hl[i]) || [];
    var nc = p.cols.length, lw = LW;
    var cw = (width - lw - 2) / nc, ch = p.text ? 22 : Math.max(14, Math.min(24, cw));
    var line = "", per = Math.max(10, Math.floor(width / 7.5));  // the title, wrapped at words
    p.title.split(" ").concat([null]).forEach(function (word) {
      if (line && (word === null || (line + " " + word).length > per)) {
        add(svg, "text", {x: 0, y: y + 14, "font-weight": "bold", "font-size": 13}, line);
        y += 17;
        line = "";
      }
      if (word !== null) line = line ? line + " " + word : word;
    });
    y += 5;
    // every column labelled: upright when they fit (down to 8 px), else turned a quarter (a
    // column's width then holds a line's height), down to 6 px (a program's tokens: each is
    // read); only if that is too small, every step-th one at 9 px or more (at 6 px, every other
    // one of 48 positions on a phone could not be read)
    var chars = Math.max(1, longest(p.cols)), fs = Math.min(11, cw / (0.62 * chars) - 0.5);
    var turn = fs < 8, step = 1;
    if (turn) {
      fs = Math.min(11, cw / 1.25);
      if (fs < 6) {
        step = Math.ceil(9 * 1.25 / cw);
        fs = Math.min(11, step * cw / 1.25);
      }
    }
    var head = turn ? Math.ceil(0.62 * fs * chars) + 6 : 15;
    p.cols.forEach(function (c, j) {
      // an outlined column is always labelled; a label of every step-th one too close to it is not
      var near = marked.some(function (k) { return k !== j && Math.abs(k - j) < step; });
      if ((j % step || near) && marked.indexOf(j) < 0) return;
      var x = lw + (j + 0.5) * cw, bold = marked.indexOf(j) < 0 ? "normal" : "bold";
      if (!turn) {
        add(svg, "text", {x: x, y: y + 11, "text-anchor": "middle", "font-size": fs,
                          "font-weight": bold, "data-col": j}, c);
        return;
      }
      x += 0.35 * fs;  // a turned text lies left of its baseline: centre its letters
      add(svg, "text", {x: x, y: y + head - 3, "text-anchor": "start", "font-size": fs,
                        "font-weight": bold, "data-col": j,
                        transform: "rotate(-90 " + x + " " + (y + head - 3) + ")"}, c);
    });
    y += head;
    p.rows.forEach(function (r, k) {
      var top = y + k * ch;
      add(svg, "text", {x: lw - 6, y: top + ch / 2 + 4, "text-anchor": "end", "font-size": 11}, r);
      values[k].forEach(function (v, j) {
        var x = lw + j * cw, gap = cw > 6 ? 1 : 0, struck = p.struck && p.struck[k][j];
        var cell = {x: x, y: top, width: Math.max(cw - gap, 0.5), height: ch - 1, "data-v": v};
        if (v === null) {
          cell.fill = "none"; cell.stroke = "currentColor"; cell["stroke-opacity"] = 0.3;
          cell["stroke-dasharray"] = "2 2";
        } else {
          cell.fill = FILL;
          cell["fill-opacity"] = (0.06 + 0.94 * Math.min(1, Math.max(0, v / p.scale))).toFixed(3);
        }
        add(svg, "rect", cell);
        if (struck) add(svg, "line", {x1: x, y1: top + ch - 1, x2: x + cw - gap, y2: top,
                                      stroke: "currentColor", "stroke-opacity": 0.55});
        if (p.text && v !== null && cw >= 30) {
          var deep = cell["fill-opacity"] > 0.55;
          add(svg, "text", {x: x + cw / 2, y: top + ch / 2 + 4, "text-anchor": "middle",
                            "font-size": 11,
                            fill: deep ? (DARK ? "#111" : "#fff") : "currentColor"},
              p.cells ? p.cells[k][j] : v.toFixed(p.digits));
        }
      });
    });
    (p.sep || []).forEach(function (j) {
      add(svg, "line", {x1: lw + j * cw - 0.5, y1: y - 3, x2: lw + j * cw - 0.5,
                        y2: y + p.rows.length * ch + 2, stroke: "currentColor", "stroke-width": 1.5});
    });
    marked.forEach(function (j) {
      add(svg, "rect", {x: lw + j * cw - 1, y: y - 1, width: cw + 1, height: p.rows.length * ch + 1,
                        fill: "none", stroke: MARK, "stroke-width": 2.5, "data-mark": j});
    });
    return y + p.rows.length * ch + 12;
  }

  function dark() {  // light text = a dark background: a lighter fill keeps its contrast
    var c = (getComputedStyle(root).color.match(/[\d.]+/g) || [0, 0, 0]).map(Number);
    return 0.3 * c[0] + 0.59 * c[1] + 0.11 * c[2] > 140;
  }

  function draw() {
    var f = spec.frames[+slider.value], width = Math.max(260, Math.floor(box.clientWidth || 640));
    var rows = spec.panels.reduce(function (a, p) { return a.concat(p.rows); }, []);
    LW = Math.min(0.4 * width, 10 + 7 * longest(rows));
    DARK = dark();
    FILL = DARK ? "#8c9eff" : "#5c6bc0";
    var svg = document.createElementNS(NS, "svg"), y = 0;
    svg.setAttribute("role", "img");
    svg.setAttribute("aria-label", spec.title + ". " + f.caption);
    svg.setAttribute("font-family", "inherit");
    svg.setAttribute("fill", "currentColor");
    spec.panels.forEach(function (p, i) { y = panel(svg, p, i, f, width, y); });
    svg.setAttribute("viewBox", "0 0 " + width + " " + y);
    svg.setAttribute("width", width);
    svg.setAttribute("height", y);
    svg.style.display = "block";
    box.replaceChildren(svg);
    cap.textContent = f.caption;
    out.textContent = f.label;
    slider.setAttribute("aria-valuetext", f.label);
    root.setAttribute("data-frame", slider.value);
  }

  function go(k) {
    slider.value = Math.max(0, Math.min(spec.frames.length - 1, k));
    draw();
  }

  slider.addEventListener("input", draw);
  // The keys of a range input, handled here: a host page (JupyterLab's notebook) may otherwise
  // cancel them before they move the slider.
  var KEYS = {ArrowLeft: -1, ArrowDown: -1, ArrowRight: 1, ArrowUp: 1, PageDown: -5, PageUp: 5};
  slider.addEventListener("keydown", function (e) {
    var k = +slider.value, n = spec.frames.length;
    if (e.key in KEYS) go(k + KEYS[e.key]);
    else if (e.key === "Home") go(0);
    else if (e.key === "End") go(n - 1);
    else return;
    e.preventDefault();
    e.stopPropagation();
  });
  root.querySelectorAll("button").forEach(function (b) {
    b.addEventListener("click", function () { go(+slider.value + (+b.getAttribute("data-step"))); });
  });
  var width = 0;
  if (window.ResizeObserver) {
    new ResizeObserver(function () {
      if (box.clientWidth && box.clientWidth !== width) { width = box.clientWidth; draw(); }
    }).observe(box);
  }
  if (window.MutationObserver) {  // the site's light/dark switch changes the text colour
    new MutationObserver(draw).observe(document.body, {attributes: true});
  }
  draw();
})
