"""Test helper: drive the flame SVG in headless Debian chromium, no extra packages.

A wrapper page loads the SVG in an iframe (same file:// origin, allowed by
--allow-file-access-from-files), finds the frame to click by its label,
clicks the element the browser hit-tests at that frame's centre, runs a
search, and writes what it saw as JSON into the page. ``--dump-dom`` returns
that page; ``--screenshot`` takes the same state as a PNG.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from html import unescape
from pathlib import Path

WRAPPER = """<!DOCTYPE html><html><body style="margin:0">
<iframe id="fr" src="%(svg)s" width="1200" height="720" style="border:0"></iframe>
<pre id="result" style="margin:0;font-size:10px">pending</pre>
<script>
document.getElementById("fr").onload = function () {
  var d = this.contentDocument, w = this.contentWindow, out = {};
  try {
    var frames = Array.prototype.slice.call(d.querySelectorAll("g.f"));
    var target = frames.filter(function (g) {
      return g.getAttribute("data-l").indexOf(%(click)s) === 0; })[0];
    var rect = target.querySelector("rect");
    out.width_before = +rect.getAttribute("width");
    out.visible_before = frames.filter(function (g) { return g.style.display !== "none"; }).length;
    var b = rect.getBoundingClientRect(), x = b.x + b.width / 2, y = b.y + b.height / 2;
    var hit = d.elementFromPoint(x, y);
    out.hit = hit.closest("g.f") ? hit.closest("g.f").getAttribute("data-l") : hit.tagName;
    hit.dispatchEvent(new MouseEvent("mouseover", {bubbles: true, clientX: x, clientY: y}));
    out.details = d.getElementById("details").textContent;
    hit.dispatchEvent(new MouseEvent("click", {bubbles: true, clientX: x, clientY: y}));
    out.zoomed = d.documentElement.getAttribute("data-zoomed") === target.id;
    out.width_after = +rect.getAttribute("width");
    out.visible_after = frames.filter(function (g) { return g.style.display !== "none"; }).length;
    out.matches = w.flame.search(%(search)s);
    out.matched_text = d.getElementById("matched").textContent;
    out.highlighted = d.querySelectorAll("g.f.match").length;
    var odd = d.querySelector("text.odd");
    out.odd_link = odd ? odd.textContent : null;
    if (odd) {
      d.getElementById("unzoom").dispatchEvent(new MouseEvent("click", {bubbles: true}));
      out.unzoomed = !d.documentElement.hasAttribute("data-zoomed");
      odd.dispatchEvent(new MouseEvent("click", {bubbles: true}));
      out.odd_zoomed = d.documentElement.getAttribute("data-zoomed") === odd.getAttribute("data-target");
    }
    w.flame.zoom(target);
  } catch (e) { out.error = String(e); }
  document.getElementById("result").textContent = JSON.stringify(out);
};
</script></body></html>
"""

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--allow-file-access-from-files", "--window-size=1200,760", "--virtual-time-budget=5000"]


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def drive(svg: Path, click: str, search: str, workdir: Path) -> tuple[dict, Path]:
    """Click the frame whose label starts with ``click``, then search ``search``.

    Returns (what the page saw, screenshot PNG path).
    """
    page = workdir / "drive.html"
    page.write_text(WRAPPER % {"svg": svg.resolve().as_uri(), "click": json.dumps(click),
                               "search": json.dumps(search)})
    base = [chromium(), *FLAGS]
    dom = subprocess.run(base + [f"--user-data-dir={workdir / 'profile-dom'}", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    m = re.search(r'<pre id="result"[^>]*>(.*?)</pre>', dom.stdout, re.S)
    if not m:
        raise RuntimeError(f"chromium gave no result page (rc {dom.returncode}): {dom.stderr[-1500:]}")
    shot = workdir / "zoomed.png"
    subprocess.run(base + [f"--user-data-dir={workdir / 'profile-shot'}", f"--screenshot={shot}", page.as_uri()],
                   capture_output=True, timeout=120)
    return json.loads(unescape(m.group(1))), shot
