"""An impostor collector (issue 33): another user's gRPC server on the
collector's port. It answers every call, prints one JSON line per call it
gets (method, metadata, body bytes) and writes DumpStacks then KillWorkers
down any Connect stream. Hello gets a made-up proof: it has no token.

python -m tests.functional.impostor PORT [UID]: becomes UID (as root), binds
127.0.0.1:PORT (0: any) and prints {"port": N} first."""

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import grpc

from diag.pb import collector_pb2 as pb


def record(method, context, body: bytes) -> None:
    print(json.dumps({"method": method, "metadata": [list(kv) for kv in context.invocation_metadata()],
                      "body": body.hex()}), flush=True)


class Everything(grpc.GenericRpcHandler):
    def service(self, details):
        method = details.method
        if method.endswith("/Connect"):
            def connect(requests, context):
                record(method, context, b"")
                yield pb.Command(dump_stacks=pb.DumpStacks(event_id="evil")).SerializeToString()
                yield pb.Command(kill_workers=pb.KillWorkers(reason="evil")).SerializeToString()
                for body in requests:
                    record(method, context, body)
            return grpc.stream_stream_rpc_method_handler(connect)

        def unary(requests, context):
            body = b"".join(requests)
            record(method, context, body)
            if method.endswith("/Hello"):
                return pb.HelloReply(nonce=os.urandom(40), proof=os.urandom(32)).SerializeToString()
            return pb.Ack(ok=True).SerializeToString()
        return grpc.stream_unary_rpc_method_handler(unary)


def main() -> None:
    server = grpc.server(ThreadPoolExecutor(8), handlers=[Everything()])
    if len(sys.argv) > 2:   # another user from here on (root's Python is not nobody's to import from)
        os.setgid(int(sys.argv[2]))
        os.setuid(int(sys.argv[2]))
    port = server.add_insecure_port(f"127.0.0.1:{sys.argv[1]}")
    server.start()
    print(json.dumps({"port": port, "uid": os.getuid()}), flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
