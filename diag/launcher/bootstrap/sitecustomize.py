"""xpu-diag bootstrap, injected by xpu_timer_launch (the ddtrace-run way).

The launcher puts this directory first on PYTHONPATH, so Python imports this
file at start-up in every worker. It first runs any sitecustomize the user
already had (found further down sys.path), then installs the tracer. Nothing
here may break the worker: every failure is one line on stderr.
"""

import os
import sys


def _chain_user_sitecustomize():
    here = os.path.dirname(os.path.abspath(__file__))
    ours = sys.modules.pop("sitecustomize", None)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    try:
        import sitecustomize  # noqa: F401  (the user's own, if any)
    except ImportError as exc:
        if exc.name != "sitecustomize":
            sys.stderr.write(f"xpu-diag: your sitecustomize failed to import: {exc}\n")
    except Exception as exc:
        sys.stderr.write(f"xpu-diag: your sitecustomize raised: {exc!r}\n")
    finally:
        sys.path[:] = saved
        if ours is not None:
            sys.modules["sitecustomize"] = ours


def _install_tracer():
    try:
        import diag.tracer  # noqa: F401
    except ImportError:
        # Not installed in this interpreter: use the package next to us.
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        sys.path.append(root)
    from diag.tracer import install_from_env
    install_from_env()
    from diag.recover import attempt_store
    attempt_store.install()


def _die_with_launcher():
    """SIGKILL when the launcher dies, as torch's own children of a killed
    torchrun do not (docs/launcher.md, "A launcher killed by SIGKILL")."""
    import signal

    from diag.common.children import die_with_launcher
    die_with_launcher(signal.SIGKILL)


def _record_uncaught():
    """torchrun reads a failed worker's exception from TORCHELASTIC_ERROR_FILE,
    which only a script decorated with torch's ``@record`` writes. An uncaught
    exception is written there the same way (unless ``@record`` already did),
    so torchrun's summary and xpu-diag's FAILED line show it. Then Python's
    own hook prints it as before."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    previous = sys.excepthook

    def record(etype, value, tb):
        try:
            if not os.path.exists(path):
                import json
                import time
                import traceback
                data = {"message": {"message": f"{etype.__name__}: {value}", "extraInfo": {
                    "py_callstack": "".join(traceback.format_exception(etype, value, tb)),
                    "timestamp": str(int(time.time()))}}}
                tmp = f"{path}.{os.getpid()}.tmp"
                with open(tmp, "w") as f:
                    json.dump(data, f)
                os.replace(tmp, path)
        except Exception:   # never in the way of the worker's own report
            pass
        previous(etype, value, tb)

    sys.excepthook = record


try:
    _chain_user_sitecustomize()
    _install_tracer()
except Exception as _exc:  # never break the worker
    sys.stderr.write(f"xpu-diag: tracer not installed: {_exc!r}\n")
try:
    _record_uncaught()
except Exception as _exc:
    sys.stderr.write(f"xpu-diag: an uncaught exception will not reach torchrun's error file: {_exc!r}\n")
try:
    _die_with_launcher()
except Exception as _exc:
    sys.stderr.write(f"xpu-diag: this worker may outlive a launcher killed by SIGKILL: {_exc!r}\n")
