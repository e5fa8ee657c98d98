"""Entry point of ``xpu_timer_launch`` (docs/launcher.md): parse, then dispatch."""

from __future__ import annotations

import sys

from diag.launcher.config import ConfigError, parse_args

EXIT_USAGE = 2


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        config = parse_args(argv)
    except ConfigError as exc:
        sys.stderr.write(f"xpu_timer_launch: {exc}\n")
        return EXIT_USAGE
    from diag.launcher import runner
    return runner.run(config)


if __name__ == "__main__":
    sys.exit(main())
