"""Issue 33, item 3: a flood of unauthenticated uploads to a real collector
process is refused without its bodies being buffered: its RSS stays within
10 % of where it started, during the flood and after it."""

import os
import subprocess
import sys
import threading
import time

import grpc
import pytest

from tests.waiting import wait_for

TOKEN = "tok-memory"
UPLOADS = 8
UPLOAD_BYTES = 60 << 20


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@pytest.fixture
def collector_proc(tmp_path):
    address_file = tmp_path / "collector.addr"
    proc = subprocess.Popen([sys.executable, "-m", "diag.collector", "--listen", "127.0.0.1:0", "--job-id", "j",
                             "--timeline-path", str(tmp_path / "tl"), "--address-file", str(address_file)],
                            env={**os.environ, "XPU_TIMER_JOB_TOKEN": TOKEN}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: address_file.exists() or proc.poll() is not None, "the collector's address file", 60)
        assert proc.poll() is None, proc.stderr.read()
        yield proc, address_file.read_text().strip()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stderr.close()


@pytest.mark.quiet   # it reads the collector's RSS growth: another test's allocations beside it are noise
def test_unauthenticated_uploads_are_not_buffered(collector_proc):
    proc, address = collector_proc
    body = b"\0" * UPLOAD_BYTES   # an UploadStacks body as bytes: rank 0, the rest zeros
    codes, peak = [], [0]
    with grpc.insecure_channel(address) as channel:
        upload = channel.unary_unary("/diag.pb.Collector/UploadStacks")   # bytes in, bytes out
        with pytest.raises(grpc.RpcError) as refused:   # warm: gRPC's own first-call allocations
            upload(b"", timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        start = rss_bytes(proc.pid)

        def send():
            try:
                upload(body, timeout=20)
                codes.append("OK")
            except grpc.RpcError as exc:
                codes.append(exc.code().name)

        senders = [threading.Thread(target=send) for _ in range(UPLOADS)]
        for t in senders:
            t.start()
        while any(t.is_alive() for t in senders):
            peak[0] = max(peak[0], rss_bytes(proc.pid))
            time.sleep(0.01)
        for t in senders:
            t.join()
    after = rss_bytes(proc.pid)
    assert codes == ["UNAUTHENTICATED"] * UPLOADS
    assert peak[0] <= start * 1.1, f"RSS {start >> 20} MB at the start, {peak[0] >> 20} MB during the flood"
    assert after <= start * 1.1, f"RSS {start >> 20} MB at the start, {after >> 20} MB after the flood"
