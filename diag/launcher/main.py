"""Entry point of ``xpu_timer_launch`` (docs/launcher.md): parse, then dispatch."""

from __future__ import annotations

import gc
import sys

from diag.launcher.config import ConfigError, parse_args, version_line

EXIT_USAGE = 2
EXIT_NO_TORCH = 1


def no_torch_line(exc: ImportError) -> str:
    """torch is the user's to install (an unpinned one pulls the CUDA stack)."""
    return (f"xpu_timer_launch: cannot import {exc.name} in {sys.executable} ({exc}); install the "
            f"torch your cluster uses first (pip install torch==<version>), in this environment")


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--version"]:   # also without torch (the parser needs it)
        print(version_line())
        return 0
    try:
        config = parse_args(argv)
    except ConfigError as exc:
        sys.stderr.write(f"xpu_timer_launch: {exc}\n")
        return EXIT_USAGE
    except ImportError as exc:
        if not (exc.name or "").split(".")[0] == "torch":
            raise
        sys.stderr.write(no_torch_line(exc) + "\n")
        return EXIT_NO_TORCH
    from diag.launcher import runner
    code = runner.run(config)
    # The launcher holds torch's whole heap (torch.distributed.run imports
    # it). The interpreter's collections at exit walk all of it to free
    # memory the OS takes back anyway: 0.2-0.4 CPU-s a launch. Frozen, they
    # skip it; exit handlers and refcounted clean-up run as before.
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(main())
