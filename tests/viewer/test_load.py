"""Loading: sharded parsing across processes gives the same groups as one process."""

from pathlib import Path

from viewer.discover import scan
from viewer.load import load

PLAIN = Path(__file__).parent / "data" / "cases" / "plain"


def test_parallel_load_equals_serial(tmp_path):
    world = 600
    a, b = (PLAIN / "trainer-host-a-0.txt").read_text(), (PLAIN / "trainer-host-a-1.txt").read_text()
    for r in range(world):
        text = b if r % 97 == 3 else a
        (tmp_path / f"rank{r:05d}-of-{world:05d}.py.txt").write_text(text.replace("4121", str(5000 + r)))
    (tmp_path / f"rank00007-of-{world:05d}.py.json").write_text("[ {")  # one bad file among many
    event = scan(tmp_path)
    serial, parallel = load(event, jobs=1), load(event, jobs=2)
    assert {k: v for k, v in serial.views["py"].items()} == {k: v for k, v in parallel.views["py"].items()}
    assert serial.world == parallel.world == world
    assert serial.notes == parallel.notes
    assert len(parallel.notes) == 1 and "rank00007-of-00600.py.json: no usable stack" in parallel.notes[0]
    assert 7 not in parallel.errors  # its good text dump still counts
    odd = [r for (thread, frames), ranks in parallel.views["py"].items()
           if thread == "MainThread" and frames[-1].func == "load_batch" for r in ranks]
    assert odd == [r for r in range(world) if r % 97 == 3]
