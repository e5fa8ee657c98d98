"""How a person's command on a node reaches a running job's collector.

Only the job's own processes may talk to the collector (every RPC carries a
session credential from the handshake over the job token, which proves the
collector holds the token before anything is sent: diag/common/handshake.py). ``xpu-diag top`` and ``xpu-diag timeline`` are run by the person
who started the job, so the collector leaves its address and token in
``<timeline-path>/<job>/collector.json``, mode 0600: whoever can read that file
could already read the job's environment. A user who prefers not to keep the
file can pass ``--collector HOST:PORT`` with ``XPU_TIMER_JOB_TOKEN`` set.

It lives in common, not in the collector: the collector writes the file, and
the commands that read it (diag/perf/top.py, diag/timeline/cli.py) sit in
feature packages, which import no process package (docs/architecture.md).
"""

from __future__ import annotations

import glob
import json
import os
import re
from typing import Mapping

from diag.common import envnames, handshake, safe_dirs
from diag.common.options import ConfigError

ACCESS_FILE = "collector.json"
TOKEN_ENV = envnames.JOB_TOKEN
_JOB_ID_KEEP = re.compile(r"[^A-Za-z0-9._-]")


def sanitize_job_id(job_id: str) -> str:
    """Keep only ``[A-Za-z0-9._-]`` (docs/event-dir.md); raises ConfigError
    when nothing usable is left, so a job id can never be ``..`` or empty."""
    clean = _JOB_ID_KEEP.sub("", job_id)
    if clean.strip(".") == "":
        raise ConfigError(f"--job-id: {job_id!r} has no usable characters; use letters, digits, '.', '_' or '-'")
    return clean


class AccessError(ValueError):
    """The collector cannot be found or reached; the message is one line with the fix."""


def access_path(timeline_path: str, job_id: str) -> str:
    return os.path.join(timeline_path, sanitize_job_id(job_id), ACCESS_FILE)


def write(timeline_path: str, job_id: str, address: str, token: str) -> str:
    """Leave the address and token for the job's owner; returns the path."""
    path = access_path(timeline_path, job_id)
    body = {"version": 1, "job_id": job_id, "address": address, "token": token, "pid": os.getpid()}
    # Under a shared --timeline-path: no link followed, another user's directory refused.
    safe_dirs.write_file(path, (json.dumps(body) + "\n").encode(), mode=0o600, create_dirs=True)
    return path


def resolve(collector: str | None, job_dir: str | None, env: Mapping[str, str] | None = None
            ) -> tuple[str, str]:
    """(address, token) from ``--collector HOST:PORT`` plus $XPU_TIMER_JOB_TOKEN,
    or from ``--job DIR`` (``<timeline-path>/<job>``, or its collector.json)."""
    env = os.environ if env is None else env
    if collector:
        token = env.get(TOKEN_ENV, "")
        if not token:
            raise AccessError(f"--collector {collector}: set {TOKEN_ENV} to the job's token, or pass "
                              f"--job <timeline-path>/<job> to read it from {ACCESS_FILE}")
        return collector, token
    if not job_dir:
        raise AccessError("no collector given: pass --job <timeline-path>/<job> "
                          f"(or --collector HOST:PORT with {TOKEN_ENV} set)")
    path = job_dir if os.path.basename(job_dir) == ACCESS_FILE else os.path.join(job_dir, ACCESS_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            body = json.load(f)
        return str(body["address"]), str(body["token"])
    except FileNotFoundError:
        raise AccessError(no_access_file(job_dir)) from None
    except PermissionError:
        raise AccessError(f"--job {job_dir}: {path} is not readable by you; run as the job's owner") from None
    except (ValueError, KeyError, TypeError):
        raise AccessError(f"--job {job_dir}: {path} is not a collector access file") from None


def no_access_file(job_dir: str) -> str:
    """One line for a --job DIR without collector.json: a path that is not a
    job's directory, or a job that has ended (its collector removes the file
    when it stops). For the latter, the timelines its events saved are files."""
    if not os.path.isdir(job_dir):
        return (f"--job {job_dir}: no such directory; pass <timeline-path>/<job-id> of a running job "
                f"(the job id is torchrun's --rdzv-id, or the launcher's job-<hex>)")
    saved = sorted(glob.glob(os.path.join(glob.escape(job_dir), "*", "timeline.json")))
    head = (f"--job {job_dir}: no {ACCESS_FILE} there, so no collector runs for this job (it ended, or has not "
            f"started yet); run this while the job runs")
    if saved:
        return (f"{head}; the timeline saved at its last event is {saved[-1]} "
                f"({len(saved)} saved in all; open one in https://ui.perfetto.dev)")
    return f"{head}; a finished job keeps only the timeline.json saved in each event directory, and it has none"


def metadata(channel, token: str, address: str) -> tuple[tuple[str, str], ...]:
    """The call metadata every RPC on ``channel`` needs, once the collector at
    ``address`` has proved it holds ``token``; raises AccessError (one line)
    when it does not, grpc.RpcError when it cannot be reached."""
    try:
        return handshake.session_metadata(channel, token, address)
    except handshake.ImpostorError as exc:
        raise AccessError(str(exc)) from None
