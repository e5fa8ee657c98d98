"""Test helpers: protobuf builders and a fake agent that is a real gRPC client."""

from __future__ import annotations

import queue
import threading

import grpc

from diag.collector.auth import TOKEN_METADATA_KEY
from diag.pb import collector_pb2 as pb
from diag.pb import collector_pb2_grpc as pb_grpc

ALL_REDUCE = dict(name="all_reduce", kind=pb.OP_KIND_COLLECTIVE)


def rank_progress(rank, world, *, pid=None, op=None, age_s=0.0, comm_id=0, seq=0, started=None, completed=None,
                  idle_s=0.0, last_op="all_reduce", local_world=None, lane=pb.OP_KIND_COLLECTIVE, group_name=""):
    """A RankProgress; ``op`` is a dict(name=, kind=) in flight for ``age_s``
    on (comm_id, seq); ``started``/``completed`` fill CommProgress for comm_id."""
    p = pb.RankProgress(rank=rank, local_rank=rank % (local_world or world), world_size=world,
                        pid=pid if pid is not None else 1000 + rank, alive=True, idle_ns=int(idle_s * 1e9),
                        last_op=last_op)
    if op is not None:
        p.oldest_in_flight.CopyFrom(pb.InFlightOp(comm_id=comm_id, seq=seq, age_ns=int(age_s * 1e9), **op))
    if started is not None:
        p.comms.append(pb.CommProgress(comm_id=comm_id, last_started_seq=started,
                                       last_completed_seq=completed if completed is not None else started,
                                       comm_size=world, lane=lane, group_name=group_name))
    return p


def node_report(node_rank, ranks, *, job_id="job1", hostname=None, seq=1, agent_pid=None):
    return pb.NodeReport(job_id=job_id, node_rank=node_rank, hostname=hostname or f"n{node_rank}",
                         agent_pid=agent_pid or 9000 + node_rank, report_seq=seq, ranks=ranks,
                         local_world_size=len(ranks))


class FakeAgent:
    """Holds a real Connect stream open; ``send`` queues a report, commands
    arrive in ``commands`` (a queue.Queue) from a reader thread."""

    def __init__(self, address: str, token: str | None):
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.CollectorStub(self.channel)
        self.metadata = ((TOKEN_METADATA_KEY, token),) if token is not None else ()
        self._outbox: queue.Queue = queue.Queue()
        self.commands: queue.Queue = queue.Queue()
        self.error: grpc.RpcError | None = None
        self._call = self.stub.Connect(iter(self._outbox.get, None), metadata=self.metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        try:
            for command in self._call:
                self.commands.put(command)
        except grpc.RpcError as exc:
            self.error = exc
        self.commands.put(None)

    def send(self, report: pb.NodeReport) -> None:
        self._outbox.put(report)

    def report_every(self, interval: float, make_report) -> threading.Event:
        """Send ``make_report()`` every ``interval`` s until the returned event is set."""
        stop = threading.Event()

        def loop():
            while not stop.is_set():
                self.send(make_report())
                stop.wait(interval)

        threading.Thread(target=loop, daemon=True).start()
        return stop

    def next_command(self, kind: str, timeout: float = 30.0) -> pb.Command:
        """The next command of ``kind`` ("dump_stacks" / "kill_workers"), skipping others."""
        while True:
            command = self.commands.get(timeout=timeout)
            assert command is not None, f"stream ended before a {kind} command: {self.error}"
            if command.WhichOneof("command") == kind:
                return command

    def upload(self, dump: pb.StackDump, timeout: float = 10.0) -> pb.Ack:
        return self.stub.UploadStacks(dump, metadata=self.metadata, timeout=timeout)

    def close(self, clean: bool = True) -> None:
        if clean:
            self._outbox.put(None)
        else:
            self._call.cancel()
        self._reader.join(timeout=10)
        self.channel.close()
