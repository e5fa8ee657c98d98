"""One module per test, each filling :class:`diag.netcheck.api.BandwidthTest`.

``PAIR_TESTS`` run between the two members of a node pair; the switchbox
uses ``peercopy`` and ``hostcopy``; ``gemm`` is the per-GPU compute check.
"""

from diag.netcheck.measure.allreduce import AllReduce
from diag.netcheck.measure.sendrecv import SendRecv

PAIR_TESTS = {"all_reduce": AllReduce, "sendrecv": SendRecv}
