import contextlib

import pytest

from diag.collector.config import Config
from diag.collector.server import create_server

TOKEN = "test-token-0123456789"


@pytest.fixture
def start_collector(tmp_path):
    """start_collector(**config) -> (server, "127.0.0.1:port"); a real server on loopback port 0."""
    servers = []

    def start(**overrides):
        fields = dict(job_id="job1", token=TOKEN, timeline_path=str(tmp_path / "timeline"), hang_timeout_s=1.0,
                      eval_interval_s=0.1)
        fields.update(overrides)
        config = Config(**fields)
        server, port = create_server("127.0.0.1:0", config)
        server.start()
        servers.append(server)
        return server, f"127.0.0.1:{port}"

    yield start
    for server in servers:
        with contextlib.suppress(Exception):
            server.stop(grace=0).wait(5)
