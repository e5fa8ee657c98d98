"""``summary.txt`` and the terminal table: who is stuck where, who is different.

Ranks are clustered by their main thread's whole stack ("stack #1" the
biggest); the ranks outside the biggest are listed with their innermost frame
and the innermost frame of the user's own code; with hang.json, each rank's
collective, process group (by the name the HANG line gives it) and seq, and
the collector's culprits, never-entered ranks and mismatch, read as hang.json
states them (never recomputed here). "group" means a process group only.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from diag.common.ranks import fold
from viewer.api import PYTHON, Frame
from viewer.atomic import write_text
from viewer.kinds import user_frame
from viewer.load import MAIN
from viewer.merge import gaps, ranks_of


@dataclass
class Context:
    source: str
    world: int
    view: str                                   # "Python" or "native"
    hang: dict | None = None
    errors: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    bad_lines: dict[str, int] = field(default_factory=dict)
    others: list[str] = field(default_factory=list)
    table: Sequence[int] | None = None          # rank number of each bit (merge.RankLabels); None: bit r = rank r


def _innermost(frames: Sequence[Frame]) -> str:
    py = [f for f in frames if f.kind == PYTHON]
    return (py or list(frames))[-1].label


def _user(frames: Sequence[Frame]) -> str:
    """The innermost frame of the user's own code (outside the stdlib, torch and
    site-packages); empty when the stack has none (native-only dumps)."""
    f = user_frame(frames)
    return f.label if f is not None else ""


def _n(count: int) -> str:
    return f"{count} rank" + ("" if count == 1 else "s")


class Summary:
    def __init__(self, ctx: Context):
        self.ctx = ctx
        self.groups: dict[tuple[Frame, ...], int] = defaultdict(int)
        self.seen = 0

    def add_stack(self, thread: str, frames: Sequence[Frame], ranks: int) -> None:
        self.seen |= ranks
        if thread == MAIN:
            self.groups[tuple(frames)] |= ranks

    def _ranks(self, bits: int) -> list[int]:
        found = ranks_of(bits)
        return found if self.ctx.table is None else [self.ctx.table[i] for i in found]

    def sorted_groups(self) -> list[tuple[tuple[Frame, ...], int]]:
        """Biggest first; ties by lowest rank."""
        return sorted(self.groups.items(), key=lambda kv: (-kv[1].bit_count(), (kv[1] & -kv[1]).bit_length()))

    def rows(self) -> list[tuple[str, str, int, str, str, str]]:
        """(stack no, folded ranks, count, innermost frame, innermost user frame,
        collective) for the table."""
        out = []
        for i, (frames, bits) in enumerate(self.sorted_groups(), 1):
            ranks = self._ranks(bits)
            out.append((f"#{i}", fold(ranks), len(ranks), _innermost(frames), _user(frames),
                        self._collective(ranks)))
        return out

    def _collective(self, ranks: list[int]) -> str:
        info = {r.get("rank"): r for r in (self.ctx.hang or {}).get("ranks") or [] if isinstance(r, dict)}
        seen = {_op(info[r], self.ctx.hang) for r in ranks if r in info}
        return "; ".join(sorted(seen)) if seen else ""

    def _group_lines(self) -> list[str]:
        lines = [f"Where the main thread is stuck ({self.ctx.view} frames), most ranks first:"]
        for no, ranks, count, inner, user, coll in self.rows():
            lines.append(f"  {no:<4} {_n(count):<12} {'rank' if count == 1 else 'ranks'} {ranks}")
            lines.append(f"       at  {inner}" + (f"   [{coll}]" if coll else ""))
            if user and user != inner:
                lines.append(f"       in  {user}   (your code)")
        if not self.groups:
            lines.append("  (no main-thread stacks)")
        return lines

    def _odd_lines(self) -> list[str]:
        groups = self.sorted_groups()
        if len(groups) < 2:
            return []
        by_frame: dict[tuple[str, str], int] = defaultdict(int)
        for frames, bits in groups[1:]:
            by_frame[(_innermost(frames), _user(frames))] |= bits
        lines = ["", f"Odd ranks out (not at stack #1), innermost {self.ctx.view} frame:"]
        for (inner, user), bits in sorted(by_frame.items(), key=lambda kv: (kv[1] & -kv[1]).bit_length()):
            r = self._ranks(bits)
            mine = f"   (your code: {user})" if user and user != inner else ""
            lines.append(f"  {'rank' if len(r) == 1 else 'ranks'} {fold(r)}: {inner}{mine}")
        return lines

    def _hang_lines(self) -> list[str]:
        """What the collector concluded, as hang.json says it: the verdict,
        the mismatch, the culprits and who never entered; never recomputed."""
        hang = self.ctx.hang
        if not hang:
            return []
        lines = ["", "Collectives (hang.json):"]
        if hang.get("verdict"):
            lines.append(f"  {hang['verdict']}")
        mismatch = hang.get("mismatch")
        if isinstance(mismatch, dict) and isinstance(mismatch.get("summary"), str):
            lines.append(f"  mismatch: {mismatch['summary']}")
        culprits = [r for r in hang.get("culprits") or [] if isinstance(r, int)]
        if "culprits" in hang:
            lines.append(f"  culprits: {_ranks_text(culprits) if culprits else 'none named'}")
        never = {n["rank"]: n for n in hang.get("never_entered") or []
                 if isinstance(n, dict) and isinstance(n.get("rank"), int)}
        by_state: dict[str, list[int]] = defaultdict(list)
        for r in hang.get("ranks") or []:
            if isinstance(r, dict) and isinstance(r.get("rank"), int):
                by_state[_op(r, hang) + _never_text(never.get(r["rank"]))].append(r["rank"])
        for state, ranks in sorted(by_state.items(), key=lambda kv: (-len(kv[1]), min(kv[1]))):
            lines.append(f"  {_ranks_text(ranks)}: {state}")
        for s in hang.get("suspects") or []:
            if isinstance(s, dict):
                last = f", last op {s['last_op']}" if s.get("last_op") else ""
                lines.append(f"  suspect: rank {s.get('rank')} ({s.get('reason')}{last})")
        return lines

    def _missing_lines(self) -> list[str]:
        """Ranks of the world without a stack, as ranges: never ``range(world)``,
        whose size came from a file name or hang.json."""
        ranges = list(gaps(self._ranks(self.seen), self.ctx.world))
        count = sum(b - a + 1 for a, b in ranges)
        if not count:
            return []
        lines = ["", f"No usable stack for {_n(count)}: "
                     + ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)]
        first = (r for a, b in ranges for r in range(a, b + 1))
        for _, r in zip(range(20), first):
            if r in self.ctx.errors:
                lines.append(f"  rank {r}: {self.ctx.errors[r]}")
        if count > 20:
            lines.append(f"  ... and {count - 20} more")
        return lines

    def render(self) -> str:
        c = self.ctx
        lines = [f"stack-viewer summary: {c.source}",
                 f"world size {c.world}; {self.seen.bit_count()} ranks with {c.view} stacks", ""]
        lines += self._group_lines() + self._odd_lines() + self._hang_lines() + self._missing_lines()
        if c.bad_lines:
            detail = ", ".join(f"{k}: {v}" for k, v in sorted(c.bad_lines.items())[:10])
            lines += ["", f"Skipped {sum(c.bad_lines.values())} unreadable lines in "
                          f"{len(c.bad_lines)} files ({detail})"]
        if c.notes:
            lines += ["", "Notes:"] + [f"  {n}" for n in c.notes]
        if c.others:
            lines += ["", "Other events: " + ", ".join(c.others)]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> None:
        write_text(path, self.render())

    def print_table(self, console) -> None:
        """The stacks as a rich table, then the conclusion (the odd ranks out
        and the culprits), so the terminal says what summary.txt says
        (console: a rich.console.Console). Wraps at spaces, rank commas and
        a frame's "@", never inside a name, down to 80 columns."""
        from rich import box
        from rich.table import Table

        rows = self.rows()
        ranks_w = min(max([len("ranks")] + [len(r[1].replace(",", ", ")) for r in rows]), 16)
        count_w = max([1] + [len(str(r[2])) for r in rows])
        # the "where" column gets the rest, less the 4 columns' padding and rule (14)
        where_w = max(console.width - len("stack") - ranks_w - count_w - 14, 20)
        table = Table(title=f"Where ranks are stuck ({self.ctx.view} frames, world {self.ctx.world})",
                      box=box.SIMPLE_HEAD, title_justify="left")
        table.add_column("stack", no_wrap=True)
        table.add_column("ranks", overflow="fold", max_width=ranks_w)
        table.add_column("n", justify="right", no_wrap=True)
        table.add_column("where: frame, your code, collective", overflow="fold", ratio=1)
        for i, (no, ranks, count, inner, user, coll) in enumerate(rows):
            where = [f"at {_fit(inner, where_w - 3)}"]
            if user and user != inner:
                where.append(f"in {_fit(user, where_w - 3)}")
            if coll:
                where.append(coll)
            table.add_row(no, ranks.replace(",", ", "), str(count), "\n".join(where),
                          style=None if i == 0 else "bold red")
        console.print(table)
        conclusion = self._odd_lines()[1:] + self._culprit_lines()
        if conclusion:
            console.print("\n".join(conclusion), markup=False, highlight=False)

    def _culprit_lines(self) -> list[str]:
        hang = self.ctx.hang
        if not hang or "culprits" not in hang:
            return []
        culprits = [r for r in hang.get("culprits") or [] if isinstance(r, int)]
        return [f"Culprits (hang.json): {_ranks_text(culprits) if culprits else 'none named'}"]


def _ranks_text(ranks: list[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {fold(ranks)}"


def _never_text(n: dict | None) -> str:
    if n is None:
        return ""
    last = n.get("last_started_seq")
    # The group too: the rank's own clause before it names the group it waits in.
    group = n.get("group")
    where = f" (group \"{group}\", seq {n.get('seq')})" if group else f" seq {n.get('seq')}"
    return (f"  <- NEVER ENTERED {n.get('op')}{where}"
            + (f" (last started seq {last})" if last is not None else ""))


def _fit(label: str, width: int) -> str:
    """A frame label that does not fit ``width`` is broken before its "@",
    so the function name and the file stay whole words."""
    func, at, where = label.partition("@")
    return label if len(label) <= width or not at else f"{func}\n   @{where}"


def group_text(hang: dict | None, comm_id, name) -> str:
    """The process group as the HANG line says it: ``"default" (ranks 0-3)``,
    the id where it has no name; members from hang.json's ``groups``."""
    known = next((g for g in (hang or {}).get("groups") or []
                  if isinstance(g, dict) and g.get("comm_id") == comm_id), {})
    name = name or known.get("name")
    said = f'"{name}"' if name else str(comm_id)
    return f"{said} (ranks {known['ranks']})" if known.get("ranks") else said


def _op(r: dict, hang: dict | None = None) -> str:
    if not r.get("op"):
        last = r.get("last_completed_seq")
        return "not in any collective" + (f" (last completed seq {last})" if last is not None else "")
    return f"{r['op']} (group {group_text(hang, r.get('comm_id'), r.get('group'))}, seq {r.get('seq')})"
