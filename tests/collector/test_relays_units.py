"""Report relays' pure parts (docs/collector.md "Report relays"): which
agent is asked to serve, when the group is sent to its relay, what a lost
relay means; the perf path's GIL share. The processes are in
test_report_relays.py."""

from __future__ import annotations

from diag.collector.relay_board import ASK_AGAIN_S, PASS_OVER_S, PERF_EVERY, RelayBoard
from diag.collector import watchdog
from diag.collector.watchdog import GilShare


def _which(command):
    return None if command is None else command.WhichOneof("command")


def test_one_agent_a_group_is_asked_then_the_group_is_sent_to_its_relay():
    board = RelayBoard(32)
    first = board.advice(40, now=100.0)                       # node 40: group 1
    assert _which(first) == "serve_relay" and first.serve_relay.group == 1 and first.serve_relay.nodes == 32
    assert board.advice(41, now=101.0) is None                 # the group's relay is on its way: no second one
    assert _which(board.advice(0, now=101.0)) == "serve_relay"  # group 0 is another group
    assert board.link("1@10.0.0.7:4242") == (1, "10.0.0.7:4242") and board.linked == 1
    via = board.advice(63, now=102.0)
    assert _which(via) == "relay_via" and via.relay_via.address == "10.0.0.7:4242"
    assert via.relay_via.perf_every == PERF_EVERY


def test_an_agent_that_never_links_a_relay_is_passed_over():
    board = RelayBoard(8)
    assert _which(board.advice(3, now=0.0)) == "serve_relay"
    assert board.advice(4, now=ASK_AGAIN_S - 1) is None
    assert _which(board.advice(4, now=ASK_AGAIN_S + 1)) == "serve_relay"   # the next direct agent of the group


def test_an_asked_agent_that_still_reports_is_asked_again_not_passed_over():
    """A relay slow to start (a connection storm): its agent, still reporting
    directly, is asked again (its agent starts none while one runs) and no
    other agent of the group starts a second relay, until PASS_OVER_S."""
    board = RelayBoard(8)
    assert _which(board.advice(3, now=0.0)) == "serve_relay"
    t = 0.0
    while t + 2 < PASS_OVER_S:   # node 3 is advised every 2 s, as every direct agent is
        t += 2
        if t >= ASK_AGAIN_S:
            assert board.advice(4, now=t) is None, t   # never a second agent while node 3 reports
        again = board.advice(3, now=t)
        assert _which(again) == ("serve_relay" if t in (16.0, 32.0) else None), t   # every ASK_AGAIN_S
    assert _which(board.advice(4, now=PASS_OVER_S)) == "serve_relay"   # it has had its chances: the next one
    assert board.advice(3, now=PASS_OVER_S + 1) is None and board.advice(5, now=PASS_OVER_S + 2) is None
    assert board.link("0@h:1") == (0, "h:1")
    assert _which(board.advice(3, now=PASS_OVER_S + 3)) == "relay_via"


def test_a_lost_relay_sends_its_group_back_and_a_new_one_is_asked_at_once():
    board = RelayBoard(8)
    board.advice(0, now=0.0)
    board.link("0@h:1")
    board.lost(0, "h:9")                        # an older relay of the group: not the one in use
    assert board.linked == 1 and _which(board.advice(5, now=1.0)) == "relay_via"
    board.lost(0, "h:1")
    assert board.linked == 0
    assert _which(board.advice(5, now=2.0)) == "serve_relay"   # asked when it linked, not 15 s ago


def test_a_second_relay_of_a_group_is_refused_while_the_first_serves():
    board = RelayBoard(8)
    assert board.serving("0@h:2") is None
    board.link("0@h:1")
    assert board.serving("0@h:2") == "h:1" and board.serving("0@h:1") is None   # not itself
    assert board.serving("1@h:2") is None                                        # another group
    board.lost(0, "h:1")
    assert board.serving("0@h:2") is None and board.link("0@h:2") == (0, "h:2") and board.linked == 1


def test_a_malformed_relay_is_refused():
    board = RelayBoard(8)
    for bad in ("", "x@h:1", "1h:1", "1@host-without-port"):
        assert board.link(bad) is None
    assert board.linked == 0


class _Clock:
    """perf_counter and sleep for GilShare: work advances it, sleep records."""

    def __init__(self) -> None:
        self.now, self.slept = 0.0, []
        self.on_sleep = None

    def perf_counter(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.slept.append(round(s, 6))
        self.now += s
        if self.on_sleep is not None:
            self.on_sleep()


def test_gil_share_keeps_a_long_pass_to_its_share(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(watchdog, "time", clock)
    pause = GilShare(0.25)
    for _ in range(4):          # 4 chunks of 20 ms of work
        clock.now += 0.02
        pause()
    assert clock.slept == [0.06] * 4   # three times the work again: a quarter of the time working


def test_gil_share_never_sleeps_on_a_small_pass(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(watchdog, "time", clock)
    pause = GilShare(0.25)
    for _ in range(100):
        clock.now += 0.00005     # 100 chunks of 50 us: 5 ms in all, below the 10 ms it lets pass
        pause()
    assert clock.slept == []


def test_gil_share_waits_while_a_hang_is_judged(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(watchdog, "time", clock)
    judging = [True]
    clock.on_sleep = lambda: judging.__setitem__(0, len(clock.slept) < 3)
    GilShare(0.25, lambda: judging[0])()
    assert clock.slept == [0.05, 0.05, 0.05]   # held until the judging ended, then on at once
