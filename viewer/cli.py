"""``stack-viewer --path DIR [--event NAME|latest] [--out DIR] [--format ...]``.

Exit status: 0 written; 1 bad input or no usable stacks (an error SVG is still
written); 2 bad command line. Every failure is one line on stderr.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from diag import __version__
from viewer.api import NoStacks, ViewerError
from viewer.outputs.dot import DOT_MAX_SIZE, DOT_TIMEOUT_S, size_text
from viewer.render import FORMATS

_MAX_NOTES = 5  # on the terminal; summary.txt has them all
_EVENT = re.compile(r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?$")


@dataclass(frozen=True)
class Config:
    path: Path
    event: str
    out: Path | None        # None: the event directory itself
    formats: frozenset[str]
    jobs: int = 1
    dot_timeout: float = DOT_TIMEOUT_S
    dot_max_size: int = DOT_MAX_SIZE

    def __post_init__(self):
        if self.jobs < 1:
            raise ValueError(f"--jobs {self.jobs}: expected a whole number >= 1")
        bad = sorted(self.formats - set(FORMATS))
        if bad or not self.formats:
            raise ValueError(f"--format {','.join(bad) or '(empty)'}: expected a comma list of {','.join(FORMATS)}")
        if not _EVENT.match(self.event) or ".." in self.event:
            raise ValueError(f"--event {self.event!r}: expected an event name, job/event or 'latest'")


def parse_args(argv: list[str]) -> Config:
    """Pure: argv -> validated Config. Raises SystemExit(2) with a one-line message."""
    p = argparse.ArgumentParser(prog="stack-viewer", description="Merge per-rank stack dumps into flame "
                                "graphs, a call tree and a summary of who is stuck where.")
    p.add_argument("--version", action="version", version=f"stack-viewer (xpu-diag) {__version__}")
    p.add_argument("--path", required=True, type=Path,
                   help="timeline root, one event directory, or any directory of per-rank dumps")
    p.add_argument("--event", default="latest", help="event name (or job/event) under --path; default latest")
    p.add_argument("--out", type=Path, default=None, help="output directory (default: the event directory)")
    p.add_argument("--format", default=",".join(FORMATS), help=f"comma list of {','.join(FORMATS)} (default all)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="processes that parse dumps when there are many (default: CPU count)")
    p.add_argument("--dot-timeout", default=f"{DOT_TIMEOUT_S:g}s",
                   help="stop graphviz's dot after this long; stacks.svg is then not drawn (default %(default)s)")
    p.add_argument("--dot-max-size", default=size_text(DOT_MAX_SIZE),
                   help="draw stacks.svg only from dot source up to this size (default %(default)s)")
    p.error = _usage_error
    a = p.parse_args(argv)
    try:
        from diag.common.units import parse_duration, parse_size
        return Config(a.path, a.event, a.out, frozenset(f.strip() for f in a.format.split(",") if f.strip()),
                      a.jobs, parse_duration(a.dot_timeout, "--dot-timeout"),
                      parse_size(a.dot_max_size, "--dot-max-size"))
    except ValueError as e:
        _usage_error(str(e))


def _usage_error(message: str):
    """argparse's error, as one line (no usage dump): exit 2."""
    print(f"stack-viewer: {message} (see stack-viewer --help)", file=sys.stderr)
    sys.exit(2)


def run(cfg: Config) -> int:
    from viewer.discover import scan
    from viewer.load import load
    from viewer.render import render

    event = scan(cfg.path, cfg.event)
    loaded = load(event, cfg.jobs)
    if cfg.out is None and not loaded.views["py"] and not loaded.views["native"] \
            and all(f.fmt == "error" for f in event.files):
        # Nothing of ours belongs in a directory without a dump (it may be
        # any directory at all); the error pictures go only where --out says.
        raise NoStacks(f"--path {event.path}: no stack dumps in it; give an event directory "
                       f"that holds rank*.py.json (or other dumps), or --out for the error pictures")
    out = cfg.out or event.path
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ViewerError(f"--out {out}: cannot create ({e.strerror}); choose a writable --out") from None
    res = render(event, loaded, out, set(cfg.formats), cfg.dot_timeout, cfg.dot_max_size)
    if loaded.bad_lines:
        print(f"stack-viewer: skipped {sum(loaded.bad_lines.values())} unreadable lines in "
              f"{len(loaded.bad_lines)} files (see summary.txt)", file=sys.stderr)
    for note in loaded.notes[:_MAX_NOTES]:
        print(f"stack-viewer: {note}", file=sys.stderr)
    if len(loaded.notes) > _MAX_NOTES:
        print(f"stack-viewer: ... and {len(loaded.notes) - _MAX_NOTES} more notes in summary.txt",
              file=sys.stderr)
    if res.empty:
        print(f"stack-viewer: no usable stacks in {event.path}; wrote error pictures to {out}", file=sys.stderr)
        return 1
    if "text" in cfg.formats and res.summary is not None:
        from rich.console import Console
        res.summary.print_table(Console())
    for m in res.messages:
        print(f"stack-viewer: {m}", file=sys.stderr)
    if event.others:
        print(f"stack-viewer: other events: {', '.join(p.name for p in event.others)}", file=sys.stderr)
    print(f"stack-viewer: wrote {', '.join(p.name for p in res.written)} to {out}")
    return 0


def _error_pictures(cfg: Config, message: str) -> str:
    """Write the error SVGs for input with no stacks into --out, only where
    the user named one (never into --path, which then holds no dump); say where."""
    from viewer.atomic import write_text
    from viewer.outputs.flame_svg import error_svg

    out = cfg.out
    if out is None:
        return ""
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stem in ("py_stack", "cpp_stack"):
            write_text(out / f"{stem}.svg", error_svg(f"stacks of {cfg.path}", message))
        return f"; wrote error pictures to {out}"
    except (OSError, ViewerError):
        return ""


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        return run(cfg)
    except NoStacks as e:
        print(f"stack-viewer: {e}{_error_pictures(cfg, str(e))}", file=sys.stderr)
        return 1
    except ViewerError as e:
        print(f"stack-viewer: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("STACK_VIEWER_DEBUG") == "1":
            raise
        print(f"stack-viewer: internal error on --path {cfg.path}: {e.__class__.__name__}: {e} "
              f"(rerun with STACK_VIEWER_DEBUG=1 for the traceback, and report it)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
