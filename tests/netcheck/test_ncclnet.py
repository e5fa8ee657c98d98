"""Which network NCCL said it used: the log parser, the log's arming, the table's net column.

NCCL itself needs a GPU: tests/gpu/test_netcheck_pairwise.py runs netcheck over
NCCL and keeps a real NCCL log (docs/gpu-runs/); the parser is tested here on
that log and on the forms older NCCL releases and IB hosts print.
"""

import io
import os
from pathlib import Path

import pytest

from diag.netcheck.ncclnet import DebugLog, NcclNet, first_warning, parse, transports

REAL_LOGS = sorted((Path(__file__).resolve().parents[2] / "docs/gpu-runs/h200x2/ncclnet").glob("nccl_init*.log"))

SOCKET_HOST = """\
h1:101:101 [0] NCCL INFO Bootstrap : Using [0]eno1:172.18.40.41<0> [1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>
h1:101:101 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
h1:101:101 [0] NCCL INFO NET/IB : No device found.
h1:101:101 [0] NCCL INFO NET/Socket : Using [0]eno1:172.18.40.41<0> [1]veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72<0>
h1:101:101 [0] NCCL INFO Using network Socket
h1:101:934 [0] NCCL INFO Channel 00 : 0[18000] -> 1[18000] [receive] via NET/Socket/1
h1:101:934 [0] NCCL INFO Channel 00 : 1[18000] -> 0[18000] [send] via NET/Socket/1
h1:101:934 [0] NCCL INFO Call to connect returned Connection timed out, retrying
h1:101:934 [0] include/socket.h:403 NCCL WARN Connect to 10.0.0.9<43711> failed : Connection timed out
"""

IB_HOST = """\
g7:5:5 [3] NCCL INFO NCCL_SOCKET_IFNAME set by environment to bond0
g7:5:5 [3] NCCL INFO Bootstrap: Using bond0:172.36.134.184<0>
g7:5:88 [3] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB bond0:172.36.134.184<0>
g7:5:88 [3] NCCL INFO Using network IB
g7:5:88 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] [send] via NET/IB/0/GDRDMA
g7:5:88 [3] NCCL INFO Channel 01/0 : 3[3] -> 2[2] via P2P/CUMEM/read
"""


def test_socket_host_names_every_interface_nccl_listed():
    net = parse(SOCKET_HOST)
    assert net.network == "Socket"
    assert net.devices == ["eno1:172.18.40.41", "veth25f2e72:fe80::380d:bfff:fe5b:54d2%veth25f2e72"]
    assert net.bootstrap == "eno1:172.18.40.41"
    assert net.short() == "Socket eno1,veth25f2e72"
    assert transports(SOCKET_HOST) == ["NET/Socket/1"]
    assert first_warning(SOCKET_HOST) == "Connect to 10.0.0.9<43711> failed : Connection timed out"


def test_ib_host_lists_hcas_not_the_oob_socket():
    net = parse(IB_HOST, socket_ifname="bond0")
    assert (net.network, net.devices, net.bootstrap) == ("IB", ["mlx5_0:1/IB", "mlx5_1:1/RoCE"], "bond0:172.36.134.184")
    assert net.short() == "IB mlx5_0,mlx5_1" and net.to_dict()["socket_ifname"] == "bond0"
    assert transports(IB_HOST) == ["NET/IB/0/GDRDMA", "P2P/CUMEM/read"]
    assert first_warning(IB_HOST) == ""


def test_a_log_that_names_no_network_gives_nothing_rather_than_a_guess():
    net = parse("h:1:1 [0] NCCL INFO cudaDriverVersion 13000\nNCCL version 2.28.3+cuda13.0\n")
    assert net.network == "" and net.devices == [] and net.short() == ""


@pytest.mark.skipif(not REAL_LOGS, reason="no NCCL log kept from a GPU run in docs/gpu-runs")
@pytest.mark.parametrize("path", REAL_LOGS, ids=lambda p: p.name)
def test_a_real_nccl_log_from_the_gpu_runs(path):
    text = path.read_text(errors="replace")
    net = parse(text)
    assert net.network == "Socket" and net.devices == ["eth0:192.0.2.2"], (path, net)   # the H200 VM: no IB
    assert transports(text) == ["P2P/CUMEM"], path                                       # NVLink within the host
    # This log was kept without the BOOTSTRAP subsystem: no bootstrap line, and none is made up.
    assert net.bootstrap == ("eth0:192.0.2.2" if "Bootstrap: Using" in text else "")


def test_the_log_is_armed_into_a_private_file_when_the_user_left_nccl_debug_alone():
    env = {"NCCL_SOCKET_IFNAME": "eth1"}
    log = DebugLog(env)
    try:
        assert env["NCCL_DEBUG"] == "INFO" and env["NCCL_DEBUG_SUBSYS"] == "INIT,NET,BOOTSTRAP"
        assert env["NCCL_DEBUG_FILE"] == log.path and oct(os.stat(os.path.dirname(log.path)).st_mode)[-3:] == "700"
        assert log.net().unrecorded == "NCCL named no network in its log"     # nothing written yet
        # What NCCL appends, pair by pair: since_last() gives each pair its own lines.
        Path(log.path).write_text(SOCKET_HOST)
        assert transports(log.since_last()) == ["NET/Socket/1"]
        with open(log.path, "a") as f:
            f.write(IB_HOST)
        assert transports(log.since_last()) == ["NET/IB/0/GDRDMA", "P2P/CUMEM/read"]
        assert log.since_last() == ""
        net = log.net()
        assert net.network == "IB" and net.socket_ifname == "eth1"
    finally:
        log.close()
    assert not os.path.exists(log.path)


@pytest.mark.parametrize("claimed", [{"NCCL_DEBUG": "WARN"}, {"NCCL_DEBUG_FILE": "/tmp/mine.%h.%p"}])
def test_a_user_who_set_nccl_debug_keeps_it_and_the_record_says_why(claimed):
    env = dict(claimed, NCCL_DEBUG_SUBSYS="ALL")
    log = DebugLog(env)
    assert env == dict(claimed, NCCL_DEBUG_SUBSYS="ALL")           # nothing of theirs changed
    net = log.net()
    assert net.network == "" and "set by the user" in net.unrecorded and list(claimed)[0] in net.unrecorded
    log.close()


def test_the_verdict_says_which_network_nccl_used_where_and_names_the_odd_node():
    from rich.console import Console

    from diag import faultlist
    from diag.netcheck.api import Measurement
    from diag.netcheck.report import render_table
    ib = NcclNet("IB", ["mlx5_0:1/IB", "mlx5_1:1/IB"], "eth0:10.0.0.1").to_dict()
    recs = [Measurement(f"g{k}", "node", None, "", reason="passed with a healthy partner",
                        extra={"node_rank": k, "addr": f"10.0.0.{k}", "iface": "eth0", "nccl": ib})
            for k in range(1, 5)]
    recs.append(Measurement("g5", "node", None, "", reason="passed with a healthy partner",
                            extra={"node_rank": 5, "addr": "10.0.0.5", "nccl": NcclNet("Socket", ["eth0:10.0.0.5"]).to_dict()}))
    recs.append(Measurement("g6", "node", None, "", reason="passed with a healthy partner",
                            extra={"node_rank": 6, "nccl": NcclNet(unrecorded="NCCL_DEBUG set by the user; NCCL's "
                                                                     "log is theirs").to_dict()}))
    for verbose in (False, True):
        buf = io.StringIO()
        render_table(faultlist.to_document([], [r.to_dict() for r in recs]), Console(file=buf, width=120),
                     verbose=verbose)
        assert buf.getvalue().splitlines()[-1] == (
            "NCCL: IB mlx5_0,mlx5_1 on g[1-4]; Socket eth0 on g5; "
            "not recorded (NCCL_DEBUG set by the user; NCCL's log is theirs) on g6")
    # gloo runs carry no NCCL record: no line.
    gloo = [Measurement("c1", "node", None, "", extra={"node_rank": 0, "iface": "veth1"})]
    buf = io.StringIO()
    render_table(faultlist.to_document([], [r.to_dict() for r in gloo]), Console(file=buf, width=120))
    assert "NCCL" not in buf.getvalue()
