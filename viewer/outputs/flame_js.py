"""The flame graph's interactive script (hover details, click-to-zoom, search).

Our own code, in the spirit of flamegraph.pl's UI. Frames carry their layout
in data attributes (x and w in rank units, d = depth, l = label), so zooming
is a rescale of those numbers. ``window.flame`` exposes zoom/unzoom/search
for keyboard use and for the browser test.
"""

SCRIPT = r"""
(function () {
  "use strict";
  var svg = document.getElementById("flame");
  var W = +svg.getAttribute("data-width"), PAD = 10, CH = +svg.getAttribute("data-char");
  var frames = Array.prototype.slice.call(svg.querySelectorAll("g.f"));
  var details = document.getElementById("details");
  var unzoomBtn = document.getElementById("unzoom");
  var matchedTxt = document.getElementById("matched");
  var zoomed = null;
  function num(g, k) { return +g.getAttribute("data-" + k); }
  function fit(label, w) {
    var n = Math.floor((w - 6) / CH);
    if (n < 3) return "";
    return label.length <= n ? label : label.slice(0, n - 2) + "..";
  }
  function place(g, x, w) {
    var r = g.querySelector("rect"), t = g.querySelector("text");
    r.setAttribute("x", x.toFixed(2));
    r.setAttribute("width", Math.max(w, g.classList.contains("hot") ? 2 : 0.5).toFixed(2));
    t.setAttribute("x", (x + 3).toFixed(2));
    t.textContent = fit(g.getAttribute("data-l"), w);
    g.style.display = "";
  }
  function zoom(g) {
    var zx = num(g, "x"), zw = num(g, "w"), zd = num(g, "d");
    var scale = (W - 2 * PAD) / zw;
    frames.forEach(function (f) {
      var x = num(f, "x"), w = num(f, "w"), d = num(f, "d");
      f.classList.remove("anc");
      if (d < zd && x <= zx && x + w >= zx + zw) {
        place(f, PAD, W - 2 * PAD); f.classList.add("anc");
      } else if (d >= zd && x >= zx && x + w <= zx + zw) {
        place(f, PAD + (x - zx) * scale, w * scale);
      } else {
        f.style.display = "none";
      }
    });
    zoomed = g;
    svg.setAttribute("data-zoomed", g.id);
    unzoomBtn.style.opacity = "1";
  }
  function unzoom() {
    var root = frames[0];
    zoom(root);
    zoomed = null;
    svg.removeAttribute("data-zoomed");
    unzoomBtn.style.opacity = "0";
  }
  function search(term) {
    var re;
    try { re = new RegExp(term); } catch (e) { matchedTxt.textContent = "bad regex"; return 0; }
    var spans = [], count = 0;
    frames.forEach(function (f) {
      var r = f.querySelector("rect");
      if (re.test(f.getAttribute("data-l"))) {
        r.setAttribute("fill", "#e040fb"); f.classList.add("match"); count++;
        if (num(f, "d") > 0) spans.push([num(f, "x"), num(f, "x") + num(f, "w")]);
      } else {
        r.setAttribute("fill", f.getAttribute("data-c")); f.classList.remove("match");
      }
    });
    spans.sort(function (a, b) { return a[0] - b[0]; });
    var total = 0, end = -1;
    spans.forEach(function (s) {
      if (s[0] >= end) { total += s[1] - s[0]; end = s[1]; }
      else if (s[1] > end) { total += s[1] - end; end = s[1]; }
    });
    var all = num(frames[0], "w");
    matchedTxt.textContent = count ? "Matched: " + count + " frames, " +
      (100 * total / all).toFixed(1) + "% of rank-threads" : "no match";
    svg.setAttribute("data-matches", String(count));
    return count;
  }
  function clearSearch() {
    frames.forEach(function (f) {
      f.querySelector("rect").setAttribute("fill", f.getAttribute("data-c"));
      f.classList.remove("match");
    });
    matchedTxt.textContent = "";
    svg.removeAttribute("data-matches");
  }
  svg.addEventListener("click", function (e) {
    var g = e.target.closest ? e.target.closest("g.f") : null;
    if (g) { zoom(g); return; }
    if (e.target === unzoomBtn) { unzoom(); return; }
    var link = e.target.getAttribute && e.target.getAttribute("data-target");
    if (link) { zoom(document.getElementById(link)); return; }
    if (e.target.id === "searchbtn") {
      var term = window.prompt("Search frames (regular expression):", "");
      if (term) search(term); else clearSearch();
    }
  });
  svg.addEventListener("mouseover", function (e) {
    var g = e.target.closest ? e.target.closest("g.f") : null;
    if (g) details.textContent = g.getAttribute("data-l") + "  (" + g.getAttribute("data-n") + ")";
  });
  svg.addEventListener("mouseout", function () { details.textContent = " "; });
  document.addEventListener("keydown", function (e) {
    if (e.key === "Escape") { unzoom(); clearSearch(); }
    if ((e.ctrlKey || e.metaKey) && e.key === "f") {
      e.preventDefault();
      var term = window.prompt("Search frames (regular expression):", "");
      if (term) search(term);
    }
  });
  window.flame = { zoom: zoom, unzoom: unzoom, search: search, clearSearch: clearSearch,
                   byId: function (id) { return document.getElementById(id); } };
})();
"""
