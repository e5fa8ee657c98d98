"""Job-token check for every RPC, health checks included.

Only the job's own processes may talk to the collector: each call must carry
the job token (env XPU_TIMER_JOB_TOKEN) in metadata ``x-xpu-diag-token``.
Health is not exempt: anyone who may ask whether the collector serves is
already part of the job (the launcher has the token), and one rule with no
exceptions is easier to audit.
"""

from __future__ import annotations

import hmac

import grpc

from diag.common import envnames

TOKEN_METADATA_KEY = "x-xpu-diag-token"


def metadata_value(metadata, key: str):
    """The value of ``key`` in gRPC metadata pairs, or None."""
    for k, v in metadata or ():
        if k == key:
            return v
    return None


async def _refuse(request_or_iterator, context):
    await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                        f"missing or wrong job token: send metadata {TOKEN_METADATA_KEY} = ${envnames.JOB_TOKEN}")


def _refusing_handler(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
    """A handler of the same streaming shape as ``handler`` that refuses."""
    if handler is None or not (handler.request_streaming or handler.response_streaming):
        return grpc.unary_unary_rpc_method_handler(_refuse)
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(_refuse)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(_refuse)
    return grpc.unary_stream_rpc_method_handler(_refuse)


class TokenInterceptor(grpc.aio.ServerInterceptor):
    """Aborts with UNAUTHENTICATED unless the metadata carries the token
    (a ``grpc.aio`` interceptor: the collector serves from one event loop)."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("the job token must not be empty")
        self._token = token.encode()

    async def intercept_service(self, continuation, handler_call_details):
        given = metadata_value(handler_call_details.invocation_metadata, TOKEN_METADATA_KEY)
        if given is not None and hmac.compare_digest(given.encode() if isinstance(given, str) else given,
                                                     self._token):
            return await continuation(handler_call_details)
        return _refusing_handler(await continuation(handler_call_details))
