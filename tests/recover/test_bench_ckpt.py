"""bench/ckpt_snapshot.py's restore check, on CPU: it must compare the
restored state with the state at the restored step. On the H100 an even
number of block pairs ended on a block without snapshots, the live model was
20 steps past the newest snapshot, and a correct restore read "DIFFERENT"."""

import importlib.util
import json
import os

import pytest
import torch

_BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench", "ckpt_snapshot.py")


def _bench():
    spec = importlib.util.spec_from_file_location("ckpt_snapshot_bench", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_an_even_number_of_pairs_checks_the_restore_at_the_snapshot_step(tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "figures.json"
    rc = _bench().main(["--tiny", "--pairs", "2", "--block", "2", "--warmup", "1", "--every", "1,2",
                        "--persist", "--persist-dir", str(tmp_path / "persist"), "--out", str(out)])
    figures = json.loads(out.read_text())
    assert rc == 0, figures
    assert figures["restore_step"] == figures["checked_step"] == figures["restore_disk_step"]
    assert figures["restore_memory_bitwise"] and figures["restore_disk_bitwise"]
    assert figures["restore_memory_differences"] == [] and figures["restore_disk_differences"] == []
    assert [r["every"] for r in figures["runs"]] == [1, 2]
    assert all(r["snapshots_committed"] == r["snapshot_steps"] for r in figures["runs"])


def test_the_differences_name_the_tensor_and_the_size_of_the_change():
    bench = _bench()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(3, 4)).sum().backward()
    opt.step()
    truth = bench.host_state(model, opt)
    assert bench.differences(truth, bench.host_state(model, opt)) == []
    with torch.no_grad():
        model[1].bias[0] += 0.5
    opt.state[model[0].weight]["exp_avg"][1, 2] -= 0.25
    got = bench.differences(truth, bench.host_state(model, opt))
    assert len(got) == 2, got
    assert got[0].startswith("model.1.bias: 1 of 2 elements differ, max abs diff 0.5"), got
    assert got[1].startswith("optim.0.weight.exp_avg: 1 of 16 elements differ, max abs diff 0.25"), got
    del opt.state[model[0].weight]["step"]
    assert "optim.0.weight.step: missing after restore" in bench.differences(truth, bench.host_state(model, opt))
