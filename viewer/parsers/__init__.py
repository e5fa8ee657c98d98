"""One small parser per stack-dump format, all returning api.ParseResult.

Each parser is tolerant: a line (or JSON entry) it cannot read is skipped and
counted in ``ParseResult.bad_lines``; only a file with nothing usable at all
raises ViewerError. ``parse_file`` picks the parser from the documented format
tag (``py``, ``gdb``, ``eu-stack``) or, for other names, by sniffing.
"""

from __future__ import annotations

import re
from pathlib import Path

from viewer.api import ParseResult, ViewerError
from viewer.parsers import eustack_text, gdb_text, pyspy_json, pyspy_text

def sniff(text: str) -> str | None:
    """Guess a format from the content: 'py-json', 'py-text', 'gdb', 'eu-stack'."""
    head = text.lstrip()[:4096]
    if re.match(r"\[\s*(\{|\]|$)", head):
        return "py-json"
    if re.search(r"^Thread \d+ \(Thread 0x|^Thread \d+ \(LWP|^#\d+\s+0x[0-9a-f]+ in ", head, re.M):
        return "gdb"
    if re.search(r"^TID \d+:", head, re.M):
        return "eu-stack"
    if re.search(r'^Thread (0x[0-9A-Fa-f]+|\d+) \([^)]*\): ', head, re.M) or head.startswith("Process "):
        return "py-text"
    return None


def parse_file(path: Path, fmt: str | None) -> ParseResult:
    """Parse one dump. ``fmt``: the name's format tag, or None to sniff.

    Raises ViewerError (one line naming the file) if the file cannot be read
    or holds no usable stack.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ViewerError(f"{path}: cannot read ({e.strerror}); check its permissions") from None
    text = data.decode("utf-8", errors="replace")
    if b"\0" in data[:4096]:
        raise ViewerError(f"{path}: binary data, not a stack dump; remove it or point --path elsewhere")
    kind = sniff(text)
    if fmt == "py" and kind not in ("py-json", "py-text"):
        kind = "py-json" if path.suffix == ".json" else "py-text"
    elif fmt in ("gdb", "eu-stack"):
        kind = fmt
    parser = {"py-json": pyspy_json, "py-text": pyspy_text, "gdb": gdb_text,
              "eu-stack": eustack_text}.get(kind or "")
    if parser is None:
        raise ViewerError(f"{path}: not a py-spy, gdb or eu-stack dump; remove it or point --path elsewhere")
    result = parser.parse(text)
    if not any(t.frames for t in result.threads):
        raise ViewerError(f"{path}: no usable stack in this {kind} dump "
                          f"({result.bad_lines} bad lines); re-take the dump")
    return result
