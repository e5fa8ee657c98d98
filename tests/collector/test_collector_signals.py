"""The real ``python -m diag.collector`` process under stop signals (issue 33 item 6)."""

import os
import signal
import subprocess
import sys
import time

from tests.waiting import wait_for

# serve() with an Event whose set() holds its lock a while, as a first
# handler that lost the CPU inside Event.set would: a second SIGTERM then
# re-entered the handler, which waited for that same lock for good.
SLOW_SET = """
import logging, sys, threading, time
from diag.collector.server import serve
from diag.collector.config import parse_args
class SlowSet(threading.Event):
    def set(self):
        with self._cond:
            time.sleep(0.5)
            self._flag = True
            self._cond.notify_all()
logging.basicConfig(level=logging.INFO)
sys.exit(serve(parse_args(sys.argv[1:]), SlowSet()))
"""


def test_a_second_sigterm_while_the_first_is_handled_still_stops_the_collector(tmp_path):
    address_file = tmp_path / "collector.addr"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_SET, "--listen", "127.0.0.1:0", "--job-id", "j",
                             "--timeline-path", str(tmp_path / "tl"), "--address-file", str(address_file)],
                            env={**os.environ, "XPU_TIMER_JOB_TOKEN": "tok"}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: address_file.exists() or proc.poll() is not None, "the collector's address", 60)
        for _ in range(5):       # a SIGTERM from the dying launcher, another from the scheduler, ...
            proc.send_signal(signal.SIGTERM)
            time.sleep(0.1)      # within the first handler's hold
        proc.wait(15)            # before: deadlocked in the handler, for good
        err = proc.stderr.read().decode()
        # The orderly stop ran; a SIGTERM after serve() returned meets the default handler.
        assert "stopped (0 node reports ingested" in err, err
        assert proc.returncode in (0, -signal.SIGTERM), err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
