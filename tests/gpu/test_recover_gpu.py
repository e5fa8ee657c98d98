"""One GPU: snapshots copied device-to-host on a side stream into the pinned
store while the next step runs, checksummed on the device, restored bitwise.
    python3 -m pytest -q -s tests/gpu/test_recover_gpu.py"""

import pytest
import torch

from diag.recover import Checkpointer, layout, store


def _model():
    torch.manual_seed(0)
    # ~200 MiB of parameters and Adam state: the copy takes milliseconds, the next step overlaps it
    model = torch.nn.Sequential(*[torch.nn.Linear(2048, 2048) for _ in range(4)]).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def _step(model, opt, k):
    g = torch.Generator(device="cuda").manual_seed(k)
    model(torch.randn(64, 2048, device="cuda", generator=g)).square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_snapshot_is_the_state_at_save_while_the_next_step_runs(tmp_path):
    model, opt = _model()
    ck = Checkpointer(str(tmp_path), None)
    ck.register(model=model, optim=opt)
    checked = 0
    for k in range(1, 9):
        _step(model, opt, k)
        ck.save(k)
        truth = {n: t.detach().clone() for n, t in model.state_dict().items()}   # on the compute stream
        _step(model, opt, 100 + k)            # changes every parameter while the copy may be in flight
        assert ck.wait(60)
        ref = store.newest_committed(str(tmp_path), 0)
        assert ref.meta.step == k
        with store.reading(ref, verify=True) as (data, _):       # the device's sums match the host bytes
            got = dict((e.path, t) for e, t in zip(ref.meta.tensors, layout.views(data, ref.meta.tensors)))
            for name, t in truth.items():
                assert torch.equal(got[("model", name)], t.cpu()), (k, name)
        checked += 1
    assert checked == 8 and any(ptr for ptr, _ in ck._pinned.values()), ck._pinned
    assert ck.stats["prehook_wait_s"] >= 0 and ck.enabled


def test_restore_on_the_gpu_is_bitwise(tmp_path):
    model, opt = _model()
    ck = Checkpointer(str(tmp_path), None)
    ck.register(model=model, optim=opt)
    for k in range(1, 6):
        _step(model, opt, k)
        ck.save(k)
    assert ck.wait(60)
    model2, opt2 = _model()
    ck2 = Checkpointer(str(tmp_path), None)
    ck2.register(model=model2, optim=opt2)
    result = ck2.restore_result()
    assert result.step == 5 and result.source == "memory"
    for p, q in zip(model.parameters(), model2.parameters()):
        assert torch.equal(p, q)
        assert all(torch.equal(opt.state[p][key].cpu(), opt2.state[q][key].cpu()) for key in opt.state[p])
        assert opt2.state[q]["exp_avg"].is_cuda
    _step(model, opt, 6), _step(model2, opt2, 6)
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), model2.parameters()))


if __name__ == "__main__":
    pytest.main([__file__, "-q", "-s"])
