"""The Checkpointer in one process: tied weights stored once, a store that
cannot work switches itself off with one line, a model that does not fit is
one line; the persist schedule and result (pure)."""

from __future__ import annotations

import io

import pytest
import torch

from diag.recover import Checkpointer, RNGState, api, store


def _tied():
    torch.manual_seed(0)
    emb, head = torch.nn.Embedding(50, 16), torch.nn.Linear(16, 50, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    return model, torch.optim.Adam(model.parameters(), lr=0.1)


def _train(model, opt, ck, steps):
    for step in range(steps):
        x = torch.arange(8) + step
        model["head"](model["emb"](x)).logsumexp(-1).sum().backward()
        opt.step(), opt.zero_grad()
        ck.save(step + 1)
    assert ck.wait(30)


def test_tied_weights_are_stored_once_and_stay_tied(tmp_path):
    model, opt = _tied()
    ck = Checkpointer(str(tmp_path), None)
    ck.register(model=model, optim=opt)
    _train(model, opt, ck, 3)
    meta = store.newest_committed(str(tmp_path), 0).meta
    emb, head = (next(e for e in meta.tensors if e.path == ("model", key)) for key in ("emb.weight", "head.weight"))
    assert emb.offset == head.offset and meta.data_bytes < 4 * 50 * 16 * 4   # weight + 2 Adam moments, once
    model2, opt2 = _tied()
    ck2 = Checkpointer(str(tmp_path), None)
    ck2.register(model=model2, optim=opt2)
    assert ck2.restore() == 3
    assert model2["head"].weight is model2["emb"].weight and torch.equal(model2["emb"].weight, model["emb"].weight)


def test_a_store_that_cannot_work_says_one_line_and_training_goes_on(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    log = io.StringIO()
    model, opt = _tied()
    ck = Checkpointer(str(blocked), None, log=log)
    ck.register(model=model, optim=opt)
    ck.register_local(rng=RNGState())
    _train(model, opt, ck, 4)                       # no exception reaches the loop
    lines = log.getvalue().splitlines()
    assert len(lines) == 1 and "snapshots are off" in lines[0] and str(blocked) in lines[0], lines
    assert not ck.enabled and ck.save(5) is False


def test_a_model_that_does_not_fit_is_one_line(tmp_path, capsys):
    model, opt = _tied()
    ck = Checkpointer(str(tmp_path), None)
    ck.register(model=model, optim=opt)
    _train(model, opt, ck, 2)
    other = torch.nn.ModuleDict({"emb": torch.nn.Embedding(50, 16)})
    ck2 = Checkpointer(str(tmp_path), None)
    ck2.register(model=other, optim=torch.optim.Adam(other.parameters()))
    with pytest.raises(SystemExit) as exit_:
        ck2.restore()
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_.value.code == 2 and len(err) == 1
    assert "model does not load into this job's ModuleDict" in err[0] and "remove" in err[0]


def test_persist_schedule_by_steps_and_by_time():
    by_steps = api.PersistSchedule(every_steps=10)
    assert by_steps.due(5, None, 0.0, 0.0) and not by_steps.due(15, 10, 99.0, 0.0) and by_steps.due(20, 10, 0, 0)
    assert not by_steps.due(10, 10, 0, 0) and not by_steps.due(None, None, 0, 0)
    by_time = api.PersistSchedule(every_s=60.0)
    assert not by_time.due(7, 3, 59.0, 0.0) and by_time.due(7, 3, 60.0, 0.0) and not by_time.due(3, 3, 999, 0)
    assert not api.PersistSchedule().due(7, 3, 1e9, 0.0)       # last words only
    with pytest.raises(ValueError, match="--ckpt-persist-every"):
        api.PersistSchedule(every_steps=0)


def test_persist_result_newest_common_step():
    r = api.PersistResult((api.RankPersist(0, 5, "written", steps=(5, 4)),
                           api.RankPersist(1, 4, "present", steps=(4, 3))))
    assert r.ok and r.newest_step == 4
    failed = api.PersistResult((api.RankPersist(0, 5, "failed", reason="no room", steps=(3,)),))
    assert not failed.ok and failed.newest_step == 3 and "rank 0: failed step 5 (no room)" == failed.summary()


def test_a_rank_that_keeps_no_tensors_commits_and_restores_its_step(tmp_path):
    """DDP's ranks other than the holder, with nothing registered of their own:
    their snapshot is only the step, and it must still count in the agreement."""
    model, opt = _tied()
    ck = Checkpointer(str(tmp_path), None, replicated=True, holder=1)    # this process is rank 0
    ck.register(model=model, optim=opt)
    _train(model, opt, ck, 2)
    ref = store.newest_committed(str(tmp_path), 0)
    assert ref.meta.step == 2 and ref.meta.data_bytes == 0 and ref.meta.names == ()
    with store.reading(ref, verify=True) as (data, objects):
        assert len(data) == 0
    ck2 = Checkpointer(str(tmp_path), None, replicated=True, holder=1)
    ck2.register(model=_tied()[0])
    assert ck2.restore() == 2


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (7, 5)), (torch.bfloat16, (3, 3)), (torch.int64, (4,)),
                                         (torch.float16, (1,)), (torch.uint8, (13,)), (torch.float32, ())])
def test_the_device_word_sum_is_the_host_checksum(dtype, shape):
    """The sums a GPU takes (layout.word_sum, the same torch ops) agree with
    what every reader recomputes from the bytes (checksum.word_sum, numpy)."""
    from diag.recover import checksum, layout
    g = torch.Generator().manual_seed(7)
    t = torch.randint(-2**62, 2**62, (max(1, torch.Size(shape).numel()),), generator=g).to(dtype).reshape(shape)
    t = t.contiguous()
    raw = t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
    part, whole = layout.word_sum(t)
    if part is None:                       # fewer than 8 bytes: the copy thread sums them on the host
        assert len(raw) < 8
        return
    assert (int(part) + checksum.tail_sum(raw[whole:])) & checksum.MASK == checksum.word_sum(raw)


def test_an_unreadable_persisted_copy_is_one_line(tmp_path, capsys):
    from diag.recover.persist import persist_newest
    model, opt = _tied()
    ck = Checkpointer(str(tmp_path / "node"), None)
    ck.register(model=model, optim=opt)
    _train(model, opt, ck, 1)
    disk = tmp_path / "disk"
    assert persist_newest(str(tmp_path / "node"), str(disk)).ok
    manifest = next(disk.glob("step-*/rank-00000/manifest.json"))
    manifest.unlink()
    manifest.mkdir()                       # reading it fails with an OSError of its own (EISDIR)
    ck2 = Checkpointer(str(tmp_path / "empty"), str(disk))
    ck2.register(model=_tied()[0])
    with pytest.raises(SystemExit):
        ck2.restore()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(manifest) in err[0], err


def test_span_sums_on_threads_are_the_word_sums():
    from concurrent.futures import ThreadPoolExecutor
    from diag.recover import checksum
    g = torch.Generator().manual_seed(3)
    buf = bytearray(torch.randint(0, 256, (30 << 20,), dtype=torch.uint8, generator=g).numpy().tobytes())
    spans = [(0, 5), (64, 3 << 20), (4 << 20, (17 << 20) + 3), (25 << 20, 0), (26 << 20, 4 << 20)]
    want = [checksum.word_sum(memoryview(buf)[o:o + n]) for o, n in spans]
    with ThreadPoolExecutor(3) as pool:
        assert checksum.span_sums(buf, spans, pool) == want
    assert checksum.span_sums(buf, spans) == want


def test_a_large_host_sum_on_threads_commits_a_slot_every_reader_accepts(tmp_path, monkeypatch):
    from diag.recover import snapshot
    monkeypatch.setattr(snapshot, "_SUM_THREADS", 3)
    state = {"w": torch.arange(18 << 20, dtype=torch.float32), "v": torch.ones(3)}    # 72 MiB
    ck = Checkpointer(str(tmp_path), None)
    ck.register(state=state)
    assert ck.save(1) and ck.wait(60) and ck.enabled
    assert ck._pool is not None
    with store.reading(store.newest_committed(str(tmp_path), 0), verify=True) as (data, _):
        assert len(data) >= 72 << 20


def _same(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(torch.equal(a[k], b[k]) and a[k].data_ptr() == b[k].data_ptr()
                                      and not a[k].requires_grad for k in a)


def test_a_plain_modules_state_dict_from_its_list_is_its_state_dict():
    from diag.recover import modstate
    model, _ = _tied()
    model["norm"] = torch.nn.BatchNorm1d(16)
    model["norm"].register_buffer("scratch", torch.zeros(2), persistent=False)
    fast = modstate.ModuleTensors(model)
    assert _same(fast.state_dict(), model.state_dict()) and fast.rebuilds == 1
    assert _same(fast.state_dict(), model.state_dict()) and fast.rebuilds == 1          # from the list
    assert "head.weight" in fast.state_dict() and "norm.scratch" not in fast.state_dict()
    model["norm"].running_mean = torch.ones(16)              # a buffer reassigned: rebuilt, the new one
    assert _same(fast.state_dict(), model.state_dict()) and fast.rebuilds == 2
    assert torch.equal(fast.state_dict()["norm.running_mean"], torch.ones(16))
    model["head"].weight.data = torch.full((50, 16), 7.0)    # storage swapped under the same Parameter
    assert _same(fast.state_dict(), model.state_dict()) and fast.rebuilds == 2
    model["head"] = torch.nn.Linear(16, 50, bias=True)       # a module swapped: rebuilt, its bias appears
    assert _same(fast.state_dict(), model.state_dict()) and "head.bias" in fast.state_dict()


def test_a_module_with_a_state_dict_hook_gets_its_real_state_dict_every_time():
    from diag.recover import modstate
    model, _ = _tied()
    model.register_state_dict_post_hook(lambda module, sd, prefix, local: sd.update(extra=torch.ones(1)))
    fast = modstate.ModuleTensors(model)
    for n in (1, 2):
        assert "extra" in fast.state_dict() and fast.rebuilds == n
