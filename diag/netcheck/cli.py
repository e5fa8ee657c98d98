"""``netcheck``: parse and dispatch only; see docs/netcheck.md for the user guide.

The check itself is in check.py, the job hook in preflight.py, the
one-process-per-GPU launch in spawn.py.
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Sequence

from diag import faultlist

# torch warns at import when numpy is absent; netcheck never uses numpy.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
from diag.netcheck.api import EXIT_CANNOT_RUN, EXIT_USAGE, NetcheckError
from diag.netcheck.config import Config, ConfigError, parse_args

NO_TORCH = ("netcheck: torch is not installed in this Python ({python}); install it "
            "(pip install torch) or run netcheck from the training environment")


def check_usage(cfg: Config) -> None:
    """What parse_args (pure) leaves to be checked before anything runs:
    the --profile name against the shipped profiles, and that --output's
    directory is writable. Raises ConfigError, so a typo costs no measurement."""
    if cfg.thresholds.profile not in ("auto", "none"):
        from diag.netcheck.rules import select_profile
        try:
            select_profile(cfg.thresholds.profile, None)
        except NetcheckError as exc:
            raise ConfigError(str(exc)) from None
    if cfg.out.topology:
        if not cfg.out.rank_order:
            raise ConfigError("--topology: only with --rank-order FILE")
        from diag.netcheck.rankorder import load_topology
        try:
            load_topology(cfg.out.topology)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    if not cfg.out.output:
        return
    if os.path.isdir(cfg.out.output):
        raise ConfigError(f"--output: {cfg.out.output} is a directory; give a file path such as "
                          f"{os.path.join(cfg.out.output, 'faults.json')}")
    where = os.path.dirname(os.path.abspath(cfg.out.output))
    if not os.path.isdir(where) or not os.access(where, os.W_OK | os.X_OK):
        raise ConfigError(f"--output: cannot write {cfg.out.output} ({where} is not a writable "
                          "directory); give a path in a writable directory")


# c10d logs every store/socket error it raises, with ~40 lines of C++ frames,
# before netcheck reports the same error in one line. Before torch loads;
# TORCH_CPP_LOG_LEVEL=WARNING in the environment shows them again.
QUIET_TORCH_CPP_LOG = ("TORCH_CPP_LOG_LEVEL", "FATAL")


def _dispatch(cfg: Config, argv: list[str]) -> int:
    if cfg.rdzv.nproc_per_node > 1:
        from diag.netcheck.spawn import spawn
        return spawn(cfg, argv)
    if cfg.mode == "preflight":
        from diag.netcheck.preflight import run_preflight
        return run_preflight(cfg)
    from diag.netcheck.check import run
    return run(cfg)


def main(argv: Sequence[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault(*QUIET_TORCH_CPP_LOG)
    try:
        cfg = parse_args(argv)
        check_usage(cfg)
    except ConfigError as exc:
        print(f"netcheck: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    try:
        code = _dispatch(cfg, argv)
    except (NetcheckError, faultlist.FaultListError, OSError) as exc:
        print(f"netcheck: {exc}", file=sys.stderr)
        code = EXIT_CANNOT_RUN
    except ImportError as exc:
        if exc.name != "torch" and not (exc.name or "").startswith("torch."):
            raise
        print(NO_TORCH.format(python=sys.executable), file=sys.stderr)
        code = EXIT_CANNOT_RUN
    except KeyboardInterrupt:
        code = 130
    if cfg.rdzv.spawn_dir:
        # A child of --nproc-per-node: a non-zero exit would make torchrun kill
        # the coordinating sibling before it hands up the verdict; the parent
        # returns the worst status instead (spawn.py).
        from diag.netcheck.handoff import hand_up
        hand_up(cfg, code=code)
        code = 0
    sys.stdout.flush()
    sys.stderr.flush()
    # A pair thread may still sit in a wedged backend; do not let interpreter
    # shutdown (c10d destructors) wait for it.
    os._exit(code)


if __name__ == "__main__":
    main()
