"""--timeline-window / XPU_TIMER_TIMELINE_WINDOW reach the agent's ring; a
failing ring switches itself off and the hang path goes on."""

import pytest

from diag.agent.sampler import Sampler
from diag.agent.state import NodeState
from diag.launcher import runner
from diag.launcher.config import ConfigError, parse_args
from diag.records import format as fmt
from diag.records.writer import RecordWriter


def test_window_from_flag_env_or_default_reaches_the_agent():
    assert parse_args(["t.py"], {}).timeline_window_s == 30.0
    assert parse_args(["--timeline-window", "10s", "t.py"], {}).timeline_window_s == 10.0
    cfg = parse_args(["t.py"], {"XPU_TIMER_TIMELINE_WINDOW": "2m"})
    assert cfg.timeline_window_s == 120.0
    agent_cfg = runner.agent_config(cfg, "127.0.0.1:1", "tok", "/tmp", {})
    assert agent_cfg.timeline_window_s == 120.0


@pytest.mark.parametrize("argv, env, named", [
    (["--timeline-window", "soon", "t.py"], {}, "--timeline-window"),
    (["--timeline-window", "0", "t.py"], {}, "--timeline-window"),
    (["t.py"], {"XPU_TIMER_TIMELINE_WINDOW": "-1s"}, "XPU_TIMER_TIMELINE_WINDOW (--timeline-window)"),
])
def test_bad_window_is_one_line_naming_it(argv, env, named):
    with pytest.raises(ConfigError) as err:
        parse_args(argv, env)
    assert str(err.value).startswith(named) and "\n" not in str(err.value)


class Broken:
    """A timeline ring (diag.records.feed.RankFeed) whose apply fails."""

    def start_rank(self, header):
        pass

    def apply(self, rank, region, producer, records):
        raise RuntimeError("bug in the ring")

    def set_dropped(self, rank, region, dropped):
        pass

    def remove_region(self, rank, region):
        pass


def test_a_failing_ring_is_switched_off_once_and_state_still_gets_every_record(tmp_path):
    said = []
    writer = RecordWriter(str(tmp_path), producer=fmt.PRODUCER_PYTHON, rank=0, local_rank=0,
                          world_size=1, pid=1234)
    op = writer.start(fmt.KIND_COLLECTIVE, "all_reduce", 0, 1)
    state = NodeState(log=said.append, timeline=Broken())
    sampler = Sampler(str(tmp_path), state, 0, lambda m, every=60: said.append(m),
                      is_alive=lambda pid: True, is_descendant=lambda pid, root: True)
    sampler.sample()
    writer.end(op, fmt.KIND_COLLECTIVE, "all_reduce", 5, 0, 1)
    sampler.sample()
    assert state.timeline is None
    assert said == ["timeline switched off: apply failed: RuntimeError('bug in the ring')"]
    [comm] = state.report()[0].comms               # the hang path saw the START and the END
    assert (comm.comm_id, comm.lane, comm.last_started_seq, comm.last_completed_seq) == (0, fmt.KIND_COLLECTIVE, 1, 1)
    writer.close()
