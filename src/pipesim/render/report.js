// pipesim's interactive report: draws the timelines, memory curves and sweep of the
// page's JSON (report_data.py) as SVG, with hover details, zoom and pan on one time axis,
// schedules stacked or one at a time, and a sortable comparison table. No libraries.
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("pipesim-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  var KIND = { F: "forward", B: "backward for the input", W: "weight gradient", BW: "fused backward (B and W)" };
  var LEFT = 46, RIGHT = 46, AXIS = 22, MEM = 70;
  var span = Math.max.apply(null, D.schedules.map(function (s) { return s.makespan; }).concat([1]));
  var view = { t0: 0, t1: span };
  var tip = document.getElementById("tip");

  function fmt(x) { return String(Number(x.toPrecision(6))); }
  function el(name, attrs, parent) {
    var e = document.createElementNS(SVGNS, name);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    var t = el("text", Object.assign({ x: x, y: y }, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  function niceStep(range, n) {
    var raw = range / Math.max(1, n), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var m = [1, 2, 5, 10].find(function (m) { return m * p >= raw; });
    return m * p;
  }
  function opName(o) { return o[0] + o[1] + "." + o[2]; }
  function itemName(e) { return e[4] ? opName(e[3]) + "&" + opName(e[4]) : opName(e[3]); }

  // ------------------------------------------------------------------ timelines
  var panels = D.schedules.map(function (s, si) {
    var div = document.createElement("div");
    div.className = "panel";
    div.id = "panel-" + si;
    var h = document.createElement("h3");
    h.textContent = s.name + " · pp=" + s.pp + " · M=" + s.M + " · bubble " + (100 * s.bubble).toFixed(1) +
      "% · makespan " + fmt(s.makespan) + (s.measured ? " (measured)" : "");
    div.appendChild(h);
    var cap = document.createElement("p");
    cap.className = "caption";
    cap.textContent = s.chunks > 1 ? s.chunk.join("; ") : "one chunk per rank";
    div.appendChild(cap);
    var svg = el("svg", { class: "timeline", "data-schedule": s.name });
    div.appendChild(svg);
    var mem = el("svg", { class: "memory", "data-schedule": s.name });
    div.appendChild(mem);
    var memcap = document.createElement("p");
    memcap.className = "caption";
    memcap.textContent = "activations alive per rank (1F1B stages); peak per rank " + s.peak.map(fmt).join(", ");
    div.appendChild(memcap);
    document.getElementById("timelines").appendChild(div);
    s.byRank = s.ev.map(function (_, i) { return i; });
    return { s: s, div: div, svg: svg, mem: mem, si: si };
  });

  function rowHeight(pp) { return Math.min(24, Math.max(9, Math.floor(320 / pp))); }

  function drawAxis(svg, x, y, w) {
    // in the outer svg, shifted to the plot, so that the end labels are not clipped
    var g = el("g", { transform: "translate(" + LEFT + ",0)", class: "axis" }, svg);
    var step = niceStep(view.t1 - view.t0, w / 90);
    el("line", { x1: 0, x2: w, y1: y, y2: y, stroke: "#888" }, g);
    for (var t = Math.ceil(view.t0 / step) * step; t <= view.t1 + 1e-9; t += step) {
      var px = x(t);
      el("line", { x1: px, x2: px, y1: y, y2: y + 4, stroke: "#888" }, g);
      text(g, px, y + 15, fmt(t), { class: "tick", "text-anchor": "middle" });
    }
  }

  function drawPanel(p) {
    var s = p.s, svg = p.svg;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    var width = Math.max(200, p.div.clientWidth), plotW = width - LEFT - RIGHT;
    var rh = rowHeight(s.pp), H = rh * s.pp + AXIS;
    svg.setAttribute("viewBox", "0 0 " + width + " " + H);
    svg.setAttribute("width", "100%");
    svg.setAttribute("height", H);
    var k = plotW / (view.t1 - view.t0);
    var x = function (t) { return (t - view.t0) * k; };
    for (var r = 0; r < s.pp; r++) {
      text(svg, LEFT - 6, r * rh + rh * 0.7, String(r), { class: "rank", "text-anchor": "end" });
      text(svg, width - RIGHT + 6, r * rh + rh * 0.7, Math.round(100 * s.util[r]) + "%", { class: "rank" });
    }
    // the plot is a nested svg: it clips what lies outside the visible time range
    var plot = el("svg", { x: LEFT, y: 0, width: plotW, height: H, class: "plot" }, svg);
    el("rect", { x: 0, y: 0, width: plotW, height: rh * s.pp, fill: "transparent", class: "bg" }, plot);
    var box = rh - 2, font = Math.min(11, box * 0.75);
    s.ev.forEach(function (e, i) {
      if (e[2] < view.t0 || e[1] > view.t1) return;
      var x0 = x(e[1]), w = Math.max(0.5, x(e[2]) - x0), y = e[0] * rh + 1;
      var halves = e[4] ? [[e[3], y, box / 2], [e[4], y + box / 2, box / 2]] : [[e[3], y, box]];
      halves.forEach(function (hv) {
        var o = hv[0], key = o[0] + o[1];
        el("rect", { x: x0, y: hv[1], width: w, height: hv[2], fill: s.fills[key], stroke: "#fff", "stroke-width": 0.5,
          class: "op", "data-s": p.si, "data-e": i }, plot);
        var label = String(o[2]), size = e[4] ? Math.min(font, hv[2] * 0.9) : font;
        if (size >= 6 && w >= 0.62 * size * label.length + 2)
          text(plot, x0 + w / 2, hv[1] + hv[2] / 2 + size * 0.35, label,
            { "text-anchor": "middle", "font-size": size, fill: s.inks[key], "pointer-events": "none" });
      });
      if (e[4]) el("rect", { x: x0, y: y, width: w, height: box, fill: "none", stroke: "#252525", "stroke-width": 0.8,
        "pointer-events": "none" }, plot);
    });
    drawAxis(svg, x, rh * s.pp, plotW);
    drawMemory(p, width, plotW, x);
  }

  var memTop = Math.max.apply(null, D.schedules.map(function (s) { return Math.max.apply(null, s.peak.concat([1])); }));
  function drawMemory(p, width, plotW, x) {
    var s = p.s, svg = p.mem;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("viewBox", "0 0 " + width + " " + MEM);
    svg.setAttribute("width", "100%");
    svg.setAttribute("height", MEM);
    var plot = el("svg", { x: LEFT, y: 0, width: plotW, height: MEM }, svg);
    var y = function (v) { return MEM - 4 - v / memTop * (MEM - 10); };
    text(svg, LEFT - 6, y(memTop) + 8, fmt(memTop), { class: "rank", "text-anchor": "end" });
    text(svg, LEFT - 6, y(0), "0", { class: "rank", "text-anchor": "end" });
    el("line", { x1: 0, x2: plotW, y1: y(0), y2: y(0), stroke: "#bbb" }, plot);
    s.mem.forEach(function (c, r) {
      var d = "M" + x(0) + "," + y(0), last = 0;
      for (var i = 0; i < c.length; i += 2) {
        d += "H" + x(c[i]).toFixed(2) + "V" + y(c[i + 1]).toFixed(2);
        last = c[i + 1];
      }
      d += "H" + x(span).toFixed(2);
      var hue = s.pp > 1 ? 220 - 200 * r / (s.pp - 1) : 220;
      el("path", { d: d, fill: "none", stroke: "hsl(" + hue + ",65%,45%)", "stroke-width": 1, class: "mem",
        "data-rank": r }, plot);
    });
  }

  function drawAll() {
    panels.forEach(function (p) { if (p.div.style.display !== "none") drawPanel(p); });
    document.getElementById("range").textContent =
      "showing t = " + fmt(view.t0) + " to " + fmt(view.t1) + " of 0 to " + fmt(span);
  }

  // ------------------------------------------------------------------ tooltip
  function chunkText(s, c) {
    return s.chunks > 1 ? s.chunk[c].replace(/^chunk \d+: /, "") : "the rank's only chunk";
  }
  function tipRow(table, k, v) {
    var tr = document.createElement("tr"), th = document.createElement("th"), td = document.createElement("td");
    th.textContent = k;
    td.textContent = v;
    tr.appendChild(th);
    tr.appendChild(td);
    tr.setAttribute("data-k", k);
    table.appendChild(tr);
  }
  function showTip(si, i, ev) {
    var s = D.schedules[si], e = s.ev[i];
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    var h = document.createElement("div");
    h.className = "tiphead";
    h.textContent = s.name + ": " + itemName(e) + (e[4] ? " (overlapped pair)" : "");
    tip.appendChild(h);
    var t = document.createElement("table");
    tipRow(t, "rank", String(e[0]));
    tipRow(t, "start", fmt(e[1]));
    tipRow(t, "end", fmt(e[2]));
    tipRow(t, "duration", fmt(e[2] - e[1]));
    (e[4] ? [["forward", e[3]], ["backward", e[4]]] : [["", e[3]]]).forEach(function (h) {
      var o = h[1], pre = h[0] ? h[0] + " " : "";
      tipRow(t, pre + "kind", o[0] + ": " + KIND[o[0]]);
      tipRow(t, pre + "micro-batch", String(o[2]));
      tipRow(t, pre + "chunk", o[1] + ": " + chunkText(s, o[1]));
      tipRow(t, pre + "stage", String(o[3]));
    });
    var deps = s.dep[i], prev = null;
    for (var j = i - 1; j >= 0; j--) if (s.ev[j][0] === e[0]) { prev = s.ev[j]; break; }
    var waits = deps.map(function (d) {
      var src = s.ev[d[0]];
      return itemName(src) + (src[0] !== e[0] ? " on rank " + src[0] : " (same rank)") + ", ready at " + fmt(d[1]) +
        (Math.abs(d[1] - e[1]) < 1e-9 ? " (set the start)" : "");
    });
    if (prev && Math.abs(prev[2] - e[1]) < 1e-9) waits.push("its rank, busy with " + itemName(prev) + " until " + fmt(prev[2]));
    tipRow(t, "waited for", waits.length ? waits.join("; ") : "nothing: it starts the step");
    if (s.evi[i] >= 0) {
      var names = e[4] ? [opName(e[3]), opName(e[4])] : [opName(e[3])];
      ["compute", "comm"].forEach(function (stream, si2) {
        var parts = s.ins[s.evi[i]].filter(function (g) { return g[0] === si2; }).map(function (g) {
          var label = g[3] < 0 ? g[1] : g[1] + " " + names[g[2]] + g[6] + " L" + g[3];
          return label + " " + fmt(e[1] + g[4]) + "–" + fmt(e[1] + g[5]);
        });
        tipRow(t, stream + " stream", parts.length ? parts.join("; ") : "idle");
      });
    } else if (e[4]) {
      tipRow(t, "streams", "one box: these costs do not see inside a pair (component costs, e.g. --preset ep-1to1, do)");
    }
    tip.appendChild(t);
    tip.hidden = false;
    moveTip(ev);
  }
  function moveTip(ev) {
    var w = tip.offsetWidth, h = tip.offsetHeight;
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 4) x = Math.max(4, ev.clientX - w - 14);
    if (y + h > window.innerHeight - 4) y = Math.max(4, ev.clientY - h - 14);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  var timelines = document.getElementById("timelines");
  timelines.addEventListener("mouseover", function (ev) {
    var t = ev.target;
    if (t.classList && t.classList.contains("op")) showTip(+t.getAttribute("data-s"), +t.getAttribute("data-e"), ev);
  });
  timelines.addEventListener("mousemove", function (ev) { if (!tip.hidden) moveTip(ev); });
  timelines.addEventListener("mouseout", function (ev) {
    if (ev.target.classList && ev.target.classList.contains("op")) tip.hidden = true;
  });

  // ------------------------------------------------------------------ zoom and pan
  var minRange = span / 1e4;
  function setView(t0, t1) {
    var r = Math.min(span, Math.max(minRange, t1 - t0));
    t0 = Math.min(Math.max(0, t0), span - r);
    view.t0 = t0;
    view.t1 = t0 + r;
    drawAll();
  }
  function zoom(f, at) {
    at = at === undefined ? (view.t0 + view.t1) / 2 : at;
    setView(at - (at - view.t0) * f, at + (view.t1 - at) * f);
  }
  function timeAt(p, clientX) {
    var b = p.svg.getBoundingClientRect(), plotW = b.width - LEFT - RIGHT;
    return view.t0 + (clientX - b.left - LEFT) / plotW * (view.t1 - view.t0);
  }
  panels.forEach(function (p) {
    p.svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      zoom(ev.deltaY < 0 ? 0.8 : 1.25, timeAt(p, ev.clientX));
    }, { passive: false });
    p.svg.addEventListener("mousedown", function (ev) {
      var start = ev.clientX, t0 = view.t0, t1 = view.t1, b = p.svg.getBoundingClientRect();
      var perPx = (t1 - t0) / (b.width - LEFT - RIGHT);
      function move(m) { setView(t0 - (m.clientX - start) * perPx, t1 - (m.clientX - start) * perPx); }
      function up() { window.removeEventListener("mousemove", move); window.removeEventListener("mouseup", up); }
      window.addEventListener("mousemove", move);
      window.addEventListener("mouseup", up);
      ev.preventDefault();
    });
  });
  document.getElementById("zoom-in").addEventListener("click", function () { zoom(0.5); });
  document.getElementById("zoom-out").addEventListener("click", function () { zoom(2); });
  document.getElementById("reset").addEventListener("click", function () { setView(0, span); });

  // ------------------------------------------------------------------ stacked or one
  var show = document.getElementById("show");
  D.schedules.forEach(function (s, i) {
    var o = document.createElement("option");
    o.value = String(i);
    o.textContent = s.name;
    show.appendChild(o);
  });
  show.addEventListener("change", function () {
    panels.forEach(function (p) { p.div.style.display = show.value === "all" || show.value === String(p.si) ? "" : "none"; });
    drawAll();
  });

  // ------------------------------------------------------------------ sortable table
  var table = document.getElementById("comparison");
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var asc = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("th").forEach(function (o) { o.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", asc ? "ascending" : "descending");
      var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      function key(row) {
        var c = row.cells[col];
        if (!c || row.cells.length < 3 && col > 0) return null; // a schedule that could not run
        var v = c.getAttribute("data-v");
        return v === null ? c.textContent : isNaN(+v) ? v : +v;
      }
      rows.sort(function (a, b) {
        var ka = key(a), kb = key(b);
        if (ka === null || kb === null) return ka === kb ? 0 : ka === null ? 1 : -1;
        var d = typeof ka === "number" && typeof kb === "number" ? ka - kb : String(ka).localeCompare(String(kb));
        return asc ? d : -d;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });

  // ------------------------------------------------------------------ sweep
  function drawSweep() {
    var box = document.getElementById("sweep");
    if (!D.sweep || !box) return;
    while (box.firstChild) box.removeChild(box.firstChild);
    var width = Math.max(300, box.clientWidth), each = Math.floor((width - 40) / 2), H = 260;
    var Ms = [].concat.apply([], D.sweep.series.map(function (s) { return s.M; }));
    var lo = Math.log2(Math.min.apply(null, Ms)), hi = Math.log2(Math.max.apply(null, Ms));
    [["bubble", "bubble ratio against micro-batches M", function (v) { return (100 * v).toFixed(0) + "%"; }],
     ["memory", "peak activation memory (1F1B stages) against M", fmt]].forEach(function (spec, n) {
      var svg = el("svg", { viewBox: "0 0 " + each + " " + H, width: each, height: H, class: "sweep", id: "sweep-" + spec[0] }, box);
      var top = Math.max.apply(null, [].concat.apply([], D.sweep.series.map(function (s) { return s[spec[0]]; }))) || 1;
      var L = 50, R = 110, T = 24, B = 30, pw = each - L - R, ph = H - T - B;
      var x = function (m) { return L + (hi > lo ? (Math.log2(m) - lo) / (hi - lo) : 0.5) * pw; };
      var y = function (v) { return T + ph - v / top * ph; };
      text(svg, L, 14, spec[1], { class: "tick" });
      el("line", { x1: L, x2: L + pw, y1: T + ph, y2: T + ph, stroke: "#888" }, svg);
      Array.from(new Set(Ms)).sort(function (a, b) { return a - b; }).forEach(function (m) {
        text(svg, x(m), T + ph + 15, String(m), { class: "tick", "text-anchor": "middle" });
      });
      [0, 0.5, 1].forEach(function (f) { text(svg, L - 4, y(top * f) + 4, spec[2](top * f), { class: "tick", "text-anchor": "end" }); });
      var ends = [];
      D.sweep.series.forEach(function (s, i) {
        var colour = "hsl(" + (i * 67 % 360) + ",60%,42%)";
        var d = s.M.map(function (m, j) { return (j ? "L" : "M") + x(m).toFixed(1) + "," + y(s[spec[0]][j]).toFixed(1); }).join("");
        el("path", { d: d, fill: "none", stroke: colour, "stroke-width": 1.5, "data-series": s.name }, svg);
        s.M.forEach(function (m, j) { el("circle", { cx: x(m), cy: y(s[spec[0]][j]), r: 2.5, fill: colour }, svg); });
        ends.push({ name: s.name, y: y(s[spec[0]][s.M.length - 1]), x: x(s.M[s.M.length - 1]), colour: colour });
      });
      // end labels pushed apart so that none covers another
      ends.sort(function (a, b) { return a.y - b.y; });
      for (var j = 1; j < ends.length; j++) ends[j].y = Math.max(ends[j].y, ends[j - 1].y + 15); // 11-px text is 13 px tall
      ends.forEach(function (e) { text(svg, e.x + 6, e.y + 4, e.name, { class: "tick end-label", fill: e.colour }); });
    });
  }

  var pending = null;
  window.addEventListener("resize", function () {
    clearTimeout(pending);
    pending = setTimeout(function () { drawAll(); drawSweep(); }, 100);
  });
  drawAll();
  drawSweep();
  window.pipesimReport = { view: view, span: span, setView: setView };
})();
