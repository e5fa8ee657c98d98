import pytest

from diag.netcheck.config import ConfigError, parse_args

RDV = ["--nnodes", "4", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29600"]


def test_flags():
    cfg = parse_args(RDV + ["--size", "64M", "--timeout", "30s", "--min-busbw", "20", "--output", "f.json",
                            "--format", "slurm"], env={})
    assert (cfg.rdzv.nnodes, cfg.rdzv.node_rank, cfg.rdzv.master_addr, cfg.rdzv.master_port) == (4, 1, "10.0.0.1", 29600)
    assert cfg.measure.size == 64 << 20 and cfg.measure.timeout == 30.0 and cfg.thresholds.min_busbw == 20.0
    assert cfg.pairwise and not cfg.switchbox and cfg.out.format == "slurm"


def test_defaults():
    cfg = parse_args(RDV, env={})
    assert cfg.measure.timeout == 60.0 and cfg.measure.size is None and cfg.thresholds.rel_ratio == 0.5
    assert cfg.thresholds.min_bandwidth == 10000.0 and cfg.thresholds.min_channels == 2 and cfg.thresholds.profile == "auto"


def test_torchrun_env_and_flags_win():
    env = {"WORLD_SIZE": "8", "RANK": "3", "MASTER_ADDR": "h0", "MASTER_PORT": "29400", "LOCAL_RANK": "3",
           "LOCAL_WORLD_SIZE": "8", "TORCHELASTIC_USE_AGENT_STORE": "True", "XPU_TIMER_NODE_NAME": "gpu-a7"}
    cfg = parse_args([], env=env)
    assert (cfg.rdzv.nnodes, cfg.rdzv.node_rank, cfg.rdzv.master_addr, cfg.rdzv.master_port) == (8, 3, "h0", 29400)
    assert cfg.rdzv.agent_store and cfg.rdzv.local_rank == 3 and cfg.rdzv.local_world_size == 8 and cfg.rdzv.node_name == "gpu-a7"
    cfg = parse_args(["--master-port", "29555", "--node-name", "x"], env=env)
    assert cfg.rdzv.master_port == 29555 and not cfg.rdzv.agent_store and cfg.rdzv.node_name == "x"


def test_switchbox_alone_needs_no_rendezvous():
    cfg = parse_args(["--switchbox-check", "--box-pairs", "0:1", "2:4", "--min-bandwidth", "20000"], env={})
    assert cfg.switchbox and not cfg.pairwise and cfg.box.box_pairs == [(0, 1), (2, 4)]
    both = parse_args(["--switchbox-check"] + RDV, env={})
    assert both.switchbox and both.pairwise


def test_preflight_pairwise_only_with_peers():
    assert not parse_args(["preflight"], env={}).pairwise
    cfg = parse_args(["preflight"] + RDV, env={})
    assert cfg.mode == "preflight" and cfg.pairwise and cfg.switchbox


@pytest.mark.parametrize("argv, start", [
    ([], "--nnodes: the pairwise check needs at least 2 nodes"),
    (RDV + ["--size", "huge"], "--size: 'huge' is not a size"),
    (RDV + ["--timeout", "0"], "--timeout: '0' must be a positive duration"),
    (["--nnodes", "2", "--node-rank", "2"], "--node-rank: 2 must be in [0, --nnodes)"),
    (["--switchbox-check", "--box-pairs", "0-1"], "--box-pairs: '0-1' is not a pair"),
    (["--switchbox-check", "--box-pairs", "1:1"], "--box-pairs: '1:1' is not a pair"),
    (RDV + ["--rel-ratio", "2"], "--rel-ratio: 2.0 must be between 0 and 1"),
    (RDV + ["--min-busbw", "-1"], "--min-busbw: -1.0 must be > 0 GB/s"),
    (RDV + ["--format", "xml"], "argument --format: invalid choice: 'xml'"),
    (RDV + ["--bogus"], "unrecognized arguments: --bogus"),
    (["--switchbox-check", "--nproc-per-node", "2"], "--nproc-per-node: only for the pairwise check"),
    (["--nnodes", "1", "--nproc-per-node", "0"], "--nproc-per-node: 0 must be >= 1"),
])
def test_bad_input_is_one_line_naming_the_option(argv, start):
    with pytest.raises(ConfigError) as info:
        parse_args(argv, env={})
    assert str(info.value).startswith(start)
    assert "\n" not in str(info.value)


def test_bad_env_names_the_variable():
    with pytest.raises(ConfigError, match="^WORLD_SIZE='four' in the environment is not valid"):
        parse_args([], env={"WORLD_SIZE": "four"})


def test_one_node_many_processes_is_a_fleet():
    cfg = parse_args(["--nnodes", "1", "--nproc-per-node", "8"], env={})
    assert cfg.rdzv.nproc_per_node == 8 and cfg.pairwise


@pytest.mark.parametrize("extra, start", [
    (["--profile", "B300"], "netcheck: --profile: unknown SKU 'B300'; known: auto, none, H100"),
    (["--output", "{tmp}"], "netcheck: --output: {tmp} is a directory"),
    (["--output", "{tmp}/missing/faults.json"], "netcheck: --output: cannot write {tmp}/missing/faults.json"),
    (["--output", "{tmp}/file/faults.json"], "netcheck: --output: cannot write {tmp}/file/faults.json"),
])
def test_profile_and_output_are_checked_before_joining(tmp_path, extra, start):
    """Node rank 1 with nobody to join: before the fix it waited out --join-timeout
    (exit 3, after the whole job had measured); now it is a usage error at once."""
    import subprocess
    import sys
    (tmp_path / "file").write_text("")
    extra = [a.format(tmp=tmp_path) for a in extra]
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--nnodes", "2", "--node-rank", "1",
                          "--master-addr", "127.0.0.1", "--master-port", "9", "--join-timeout", "60s",
                          *extra], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith(start.format(tmp=tmp_path)) and res.stderr.count("\n") == 1, res.stderr
    assert not (tmp_path / "missing").exists()


def test_unreachable_store_is_one_line_without_cpp_frames():
    """A node whose store never answers: netcheck's line only, not c10d's log of
    the same error with its C++ frames (exit 3: the check could not run)."""
    import os
    import socket
    import subprocess
    import sys
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "TORCH_CPP_LOG_LEVEL"}
    res = subprocess.run([sys.executable, "-m", "diag.netcheck.cli", "--nnodes", "2", "--node-rank", "1",
                          "--master-addr", "127.0.0.1", "--master-port", str(port), "--join-timeout", "3s"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 3, res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("netcheck: node rank 1: cannot reach the store"), lines[:5]
