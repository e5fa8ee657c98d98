"""cpp_stack.svg / py_stack.svg: which odd groups the header links name, and the
main thread's share of the page."""

import json
import re
import shutil

from viewer.api import NATIVE, PYTHON, Frame
from viewer.cli import main
from viewer.outputs.flame_svg import PAD, WIDTH, FlameSvg

from tests.viewer.goldens import CASES

LINK = re.compile(r'class="btn odd"[^>]*>▶ ([^<]*)')


def links(svg: str) -> list[str]:
    return LINK.findall(svg)


def test_links_name_the_blamed_main_thread_and_no_parked_worker_thread(tmp_path):
    # Real gdb dumps of a stalled 4-rank gloo job; hang.json blames rank 2, as the collector does.
    event = tmp_path / "ev"
    shutil.copytree(CASES / "gloo4_allformats", event)
    hang = json.loads((event / "hang.json").read_text())
    hang.update(culprits=[2], never_entered=[{"rank": 2, "op": "all_reduce", "comm_id": 0, "seq": 1,
                                             "last_started_seq": 0}])
    (event / "hang.json").write_text(json.dumps(hang))
    assert main(["--path", str(event), "--out", str(tmp_path / "out"), "--format", "svg"]) == 0
    got = links((tmp_path / "out" / "cpp_stack.svg").read_text())
    # The gloo workers wait in a futex (rank 2's for work, rank 3's for its
    # peer): parked, not stuck; rank 2's main thread says where it is.
    assert [line.split(" stuck in ")[0] for line in got] == ["rank 2 (MainThread)"], got


def test_a_traced_one_rank_hang_reads_as_one_rank(tmp_path):
    # Real py-spy and eu-stack dumps of `make demo`'s job (xpu_timer_launch, the
    # tracer on, rank 2 stalled): each rank's unnamed gloo workers line up by
    # thread id, so the one running the all_reduce is a minority of its key on
    # ranks 0, 1 and 3; linked, the hang read as four ranks (issue 43).
    assert main(["--path", str(CASES / "traced4"), "--out", str(tmp_path), "--format", "svg"]) == 0
    assert links((tmp_path / "cpp_stack.svg").read_text()) == ["rank 2 (MainThread) stuck in clock_nanosleep"]
    assert links((tmp_path / "py_stack.svg").read_text()) == [
        "rank 2 (MainThread) stuck in load_next_batch@train_stall.py:29"]


def test_a_one_against_one_split_links_the_rank_hang_json_blames():
    f = FlameSvg("t", "s", 2, culprits=0b10)
    top = (Frame("<module>", "train.py", 9, PYTHON),)
    f.add_stack("MainThread", top + (Frame("all_reduce", "torch/distributed/c10d.py", 3, PYTHON),), 0b01)
    f.add_stack("MainThread", top + (Frame("load_batch", "train.py", 4, PYTHON),), 0b10)
    assert links(f.render()) == ["rank 1 (MainThread) stuck in load_batch@train.py:4"]


def test_at_1024_ranks_the_main_thread_gets_half_the_page_not_an_eighth():
    world, everyone = 1024, (1 << 1024) - 1
    f = FlameSvg("t", "s", world)
    base = (Frame("<module>", "train.py", 9, PYTHON), Frame("all_reduce", "c10d.py", 3, PYTHON))
    f.add_stack("MainThread", base + (Frame("wait", "libtorch.so", 0, NATIVE),), everyone & ~(1 << 700))
    f.add_stack("MainThread", base[:1] + (Frame("load_batch", "train.py", 4, PYTHON),), 1 << 700)
    for t in range(7):
        f.add_stack(f"pool-{t}", (Frame("futex_wait", "libc.so.6", 0, NATIVE),), everyone)
    svg = f.render()
    width = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'data-l="([^@"]+)@[^"]*"><title>[^<]*</title><rect x="[\d.]+" y="\d+" width="([\d.]+)"', svg)}
    page = WIDTH - 2 * PAD
    assert width["MainThread"] >= page / 2 - 1, width["MainThread"]
    assert width["load_batch"] >= 0.5 and width["pool-0"] <= page / 14 + 1
    assert links(svg)[0] == "rank 700 (MainThread) stuck in load_batch@train.py:4"


def test_without_blame_a_one_against_one_split_has_no_odd_group():
    # Neither half is a minority; with no hang.json there is nothing to prefer.
    f = FlameSvg("t", "s", 2)
    top = (Frame("<module>", "train.py", 9, PYTHON),)
    f.add_stack("MainThread", top + (Frame("all_reduce", "c10d.py", 3, PYTHON),), 0b01)
    f.add_stack("MainThread", top + (Frame("load_batch", "train.py", 4, PYTHON),), 0b10)
    assert links(f.render()) == []
