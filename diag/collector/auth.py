"""The session check for every RPC, health checks included, and Hello.

Only the job's own processes may talk to the collector: each call must carry
a session credential (metadata ``x-xpu-diag-session``) that the mutual
handshake over the job token yields (diag/common/handshake.py): Hello, the
one call served without it, is answered here, so every server holding the
token (the collector, its ingest processes, a report relay) answers it the
same way. Health is not exempt: anyone who may ask whether the collector
serves is already part of the job, and one rule with no exceptions is easier
to audit.

No message body of an unauthenticated call is read: gRPC Python
reads a unary call's whole request before its handler runs, so a refused
call gets a request-streaming handler that aborts without reading, and Hello
takes its nonce from metadata. grpc core then holds no more of such a call
than its flow-control window (tests/collector/test_unauth_memory.py).
"""

from __future__ import annotations

import grpc

from diag.common import envnames, handshake
from diag.pb import collector_pb2 as pb

SESSION_METADATA_KEY = handshake.SESSION_METADATA


def metadata_value(metadata, key: str):
    """The value of ``key`` in gRPC metadata pairs, or None."""
    for k, v in metadata or ():
        if k == key:
            return v
    return None


async def _refuse(request_iterator, context):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                        f"no valid session: call Hello with the job token (${envnames.JOB_TOKEN}) first and "
                        f"send metadata {SESSION_METADATA_KEY} (diag/common/handshake.py)")


# Request-streaming whatever the method's shape: the body is never read.
_REFUSE_ONE = grpc.stream_unary_rpc_method_handler(_refuse)
_REFUSE_STREAM = grpc.stream_stream_rpc_method_handler(_refuse)


def _refusing_handler(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
    return _REFUSE_STREAM if handler is not None and handler.response_streaming else _REFUSE_ONE


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Answers Hello; aborts any other call with UNAUTHENTICATED unless its
    metadata carries a valid session credential (a ``grpc.aio`` interceptor:
    the collector serves from one event loop)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the job token must not be empty")
        self._token = token
        self._hello = grpc.stream_unary_rpc_method_handler(
            self._answer_hello, response_serializer=pb.HelloReply.SerializeToString)

    async def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method == handshake.HELLO_METHOD:
            return self._hello
        given = metadata_value(handler_call_details.invocation_metadata, SESSION_METADATA_KEY)
        if handshake.check_credential(self._token, given):
            return await continuation(handler_call_details)
        return _refusing_handler(await continuation(handler_call_details))

    async def _answer_hello(self, request_iterator, context):
        given = metadata_value(context.invocation_metadata(), handshake.HELLO_METADATA)
        try:
            nonce_a = bytes.fromhex(given) if isinstance(given, str) else b""
            nonce, proof = handshake.answer(self._token, nonce_a)
        except ValueError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"Hello needs metadata {handshake.HELLO_METADATA} = "
                                f"{handshake.NONCE_BYTES} random bytes in hex")
        return pb.HelloReply(nonce=nonce, proof=proof)
