"""Which network NCCL says it used, read from its own debug log.

netcheck leaves NCCL's interface choice to NCCL (NCCL_SOCKET_IFNAME, if the
user sets it), but a verdict that cannot say which NIC was measured is half a
verdict. NCCL says it at init, at INFO level::

    host:12:12 [0] NCCL INFO Bootstrap: Using eth0:10.0.0.4<0>
    host:12:40 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.4<0>
    host:12:40 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.4<0>
    host:12:40 [0] NCCL INFO Using network IB
    host:12:40 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read

So, unless the user set NCCL_DEBUG or NCCL_DEBUG_FILE (theirs win; we then
record nothing), netcheck asks for INFO on the INIT, NET and BOOTSTRAP subsystems into
a private file: NCCL's lines, retries included, never reach the terminal.
The log is read after each pair; the network is recorded per node and the
transports (``P2P/CUMEM``, ``NET/IB/0``, ...) per pair.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, MutableMapping

_USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$")
_NET_USING = re.compile(r"NCCL INFO NET/(\w+) ?: Using (.+?)\s*$")
_BOOTSTRAP = re.compile(r"NCCL INFO Bootstrap ?: Using (.+?)\s*$")
# "[0]eth0:10.0.0.4<0>", "eth0:10.0.0.4<0>", "[1]mlx5_1:1/RoCE": a device name and what follows its colon.
_DEVICE = re.compile(r"(?:\[\d+\])?([^\s:\[\];]+):([^\s<;]+)(?:<\d+>)?")
_CHANNEL_VIA = re.compile(r"NCCL INFO Channel .* via (\S+)")
_WARN = re.compile(r"NCCL WARN (.+?)\s*$")


@dataclass
class NcclNet:
    """What NCCL said about its network on this node (empty fields: not said)."""

    network: str = ""                         # "IB", "Socket", or a plugin's name
    devices: list[str] = field(default_factory=list)   # "eth0:10.0.0.4", "mlx5_0:1/IB"
    bootstrap: str = ""                       # "eth0:10.0.0.4": the socket NCCL bootstraps over
    socket_ifname: str = ""                   # NCCL_SOCKET_IFNAME, where the user set it
    unrecorded: str = ""                      # why nothing could be recorded

    def short(self) -> str:
        """For the one-row table: ``IB mlx5_0,mlx5_1`` or ``Socket eth0``."""
        if not self.network and not self.devices:
            return ""
        names = ",".join(dict.fromkeys(d.split(":", 1)[0] for d in self.devices))
        return f"{self.network} {names}".strip()

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v}


def parse(text: str, socket_ifname: str = "") -> NcclNet:
    """NCCL's network as the log ``text`` states it; the last statement of each kind wins."""
    net = NcclNet(socket_ifname=socket_ifname)
    by_kind: dict[str, list[str]] = {}
    for line in text.splitlines():
        if m := _USING_NETWORK.search(line):
            net.network = m.group(1)
        elif m := _NET_USING.search(line):
            body = m.group(2).split("; OOB", 1)[0]
            by_kind[m.group(1)] = [f"{d}:{rest}" for d, rest in _DEVICE.findall(body)]
        elif m := _BOOTSTRAP.search(line):
            devices = _DEVICE.findall(m.group(1))
            net.bootstrap = f"{devices[0][0]}:{devices[0][1]}" if devices else ""
    if net.network in by_kind:
        net.devices = by_kind[net.network]
    elif len(by_kind) == 1 and not net.network:
        (net.network, net.devices), = by_kind.items()
    return net


def transports(text: str) -> list[str]:
    """The distinct transports of the channels in ``text``: ``P2P/CUMEM/read``, ``NET/IB/0/GDRDMA``."""
    return list(dict.fromkeys(m.group(1) for m in _CHANNEL_VIA.finditer(text)))


def first_warning(text: str) -> str:
    m = _WARN.search(text)
    return m.group(1) if m else ""


class DebugLog:
    """NCCL's INFO log for this process, where the user has not claimed NCCL_DEBUG.

    Must be armed before the process's first NCCL call: NCCL reads these
    variables once.
    """

    def __init__(self, environ: MutableMapping[str, str] | None = None):
        env = os.environ if environ is None else environ
        self.socket_ifname = env.get("NCCL_SOCKET_IFNAME", "")
        self.path = ""
        self.why_not = ""
        self._dir = ""
        self._offset = 0
        claimed = [k for k in ("NCCL_DEBUG", "NCCL_DEBUG_FILE") if env.get(k)]
        if claimed:
            self.why_not = f"{' and '.join(claimed)} set by the user; NCCL's log is theirs"
            return
        self._dir = tempfile.mkdtemp(prefix="netcheck-nccl-")
        self.path = os.path.join(self._dir, "nccl.log")
        env["NCCL_DEBUG"] = "INFO"
        env.setdefault("NCCL_DEBUG_SUBSYS", "INIT,NET,BOOTSTRAP")   # 2.28 says "Bootstrap: Using" under BOOTSTRAP
        env["NCCL_DEBUG_FILE"] = self.path

    def _read(self) -> str:
        try:
            with open(self.path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def net(self) -> NcclNet:
        """What NCCL has said so far about its network."""
        if not self.path:
            return NcclNet(socket_ifname=self.socket_ifname, unrecorded=self.why_not)
        net = parse(self._read(), self.socket_ifname)
        if not net.network and not net.devices:
            net.unrecorded = "NCCL named no network in its log"
        return net

    def since_last(self) -> str:
        """The log written since the previous call (one pair's lines)."""
        if not self.path:
            return ""
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                new = f.read()
        except OSError:
            return ""
        self._offset += len(new)
        return new.decode(errors="replace")

    def close(self) -> None:
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = ""
