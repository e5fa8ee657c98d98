"""The mutual handshake over the job token (docs/collector.md, "Authentication").

Whoever listens on the collector's address first gets the agents' calls: on a
shared host that can be another user. So no caller sends the token,
or anything that proves it, before the server has proved that it holds the
token, and the token itself never goes on the wire:

1. caller -> server  Hello, metadata ``x-xpu-diag-hello`` = nonce_a (16 random bytes)
2. server -> caller  nonce_c, proof_c = HMAC(token, "xpu-diag collector" | nonce_a | nonce_c)
3. the caller checks proof_c (an impostor cannot make it: nonce_a is fresh), then
   sends on every call ``x-xpu-diag-session`` = nonce_c | nonce_a | HMAC(token,
   "xpu-diag agent" | nonce_c | nonce_a)

The labels and the nonces' order differ by direction, so neither proof can be
reflected as the other. nonce_c carries the server's issue time and a tag
keyed by the token, so any process holding the token (the collector, its
ingest processes, a relay) checks a credential without shared state, and a
credential is good for SESSION_S only. A credential is a bearer secret for
that hour: only a proven server ever sees it.

What it does not do: encrypt, or bind the session to the connection. A
man in the middle that forwards both ways between an agent and the real
collector can ride the session; on one host that needs the collector's port,
which the real collector then does not have.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import struct
import threading
import time

HELLO_METHOD = "/diag.pb.Collector/Hello"
HELLO_METADATA = "x-xpu-diag-hello"
SESSION_METADATA = "x-xpu-diag-session"
NONCE_BYTES = 16
_TAG_BYTES = 16
_SERVER_NONCE_BYTES = NONCE_BYTES + 8 + _TAG_BYTES   # random | issued (s, big-endian) | tag
_MAC_BYTES = 32
SESSION_S = 3600.0    # a credential is accepted this long after its nonce was issued
RENEW_S = 1800.0      # a caller makes a new one after this (its own clock: no skew matters)
SKEW_S = 300.0        # an issue time this far ahead of the checking server's clock still counts
HELLO_TIMEOUT_S = 10.0


class ImpostorError(Exception):
    """The server did not prove it holds the job token; the message is one line."""


def _mac(token: str, label: bytes, *parts: bytes) -> bytes:
    return hmac.new(token.encode(), label + b"\0" + b"".join(parts), hashlib.sha256).digest()


# -- the server's side ---------------------------------------------------------
def answer(token: str, nonce_a: bytes, now: float | None = None) -> tuple[bytes, bytes]:
    """(nonce_c, proof_c) for a caller's nonce; ValueError for a malformed one."""
    if len(nonce_a) != NONCE_BYTES:
        raise ValueError(f"the hello nonce must be {NONCE_BYTES} bytes")
    rand = secrets.token_bytes(NONCE_BYTES)
    issued = struct.pack(">Q", int(time.time() if now is None else now))
    nonce_c = rand + issued + _mac(token, b"xpu-diag nonce", rand, issued)[:_TAG_BYTES]
    return nonce_c, _mac(token, b"xpu-diag collector", nonce_a, nonce_c)


def check_credential(token: str, credential: str | bytes | None, now: float | None = None) -> bool:
    """Whether ``credential`` (the session metadata's hex) was made with the
    token on a nonce this job's server issued less than SESSION_S ago."""
    if not credential:
        return False
    try:
        raw = bytes.fromhex(credential.decode() if isinstance(credential, bytes) else credential)
    except (ValueError, UnicodeDecodeError):
        return False
    if len(raw) != _SERVER_NONCE_BYTES + NONCE_BYTES + _MAC_BYTES:
        return False
    nonce_c, rest = raw[:_SERVER_NONCE_BYTES], raw[_SERVER_NONCE_BYTES:]
    nonce_a, mac = rest[:NONCE_BYTES], rest[NONCE_BYTES:]
    rand, issued, tag = nonce_c[:NONCE_BYTES], nonce_c[NONCE_BYTES:-_TAG_BYTES], nonce_c[-_TAG_BYTES:]
    if not hmac.compare_digest(tag, _mac(token, b"xpu-diag nonce", rand, issued)[:_TAG_BYTES]):
        return False
    age = (time.time() if now is None else now) - struct.unpack(">Q", issued)[0]
    if not -SKEW_S <= age <= SESSION_S:
        return False
    return hmac.compare_digest(mac, _mac(token, b"xpu-diag agent", nonce_c, nonce_a))


# -- the caller's side ---------------------------------------------------------
def credential(token: str, nonce_a: bytes, nonce_c: bytes, proof_c: bytes, address: str) -> str:
    """The session credential, once ``proof_c`` shows the server holds the
    token; raises ImpostorError (one line naming ``address``) otherwise."""
    if len(nonce_c) != _SERVER_NONCE_BYTES or not hmac.compare_digest(
            proof_c, _mac(token, b"xpu-diag collector", nonce_a, nonce_c)):
        raise ImpostorError(f"the server at {address} failed to prove it holds this job's token: another "
                            f"process holds that port, or its job token differs; nothing was sent to it")
    return (nonce_c + nonce_a + _mac(token, b"xpu-diag agent", nonce_c, nonce_a)).hex()


def _hello_call(channel):
    from diag.pb import collector_pb2 as pb
    return channel.stream_unary(HELLO_METHOD, request_serializer=pb.HelloRequest.SerializeToString,
                                response_deserializer=pb.HelloReply.FromString)


def _not_ours(exc, address: str) -> ImpostorError | None:
    """The ImpostorError for a Hello that failed with ``exc``, or None when the
    server could not be reached (try again later)."""
    import grpc

    if exc.code() not in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.INTERNAL,
                          grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.UNAUTHENTICATED):
        return None
    # A gRPC server that is not this job's collector (or one so old it takes
    # the token in the clear): it gets nothing more from us.
    return ImpostorError(f"the server at {address} is not this job's collector (it answered Hello with "
                         f"{exc.code().name}): another process holds that port, or it runs an older "
                         f"xpu-diag; nothing was sent to it")


def hello(channel, token: str, address: str, timeout: float = HELLO_TIMEOUT_S) -> str:
    """Run the handshake on ``channel`` (a grpc.Channel); returns the session
    credential. Raises ImpostorError when the server answers without the
    proof or does not know Hello (no collector of this job answers there),
    grpc.RpcError when it cannot be reached."""
    import grpc

    nonce_a = secrets.token_bytes(NONCE_BYTES)
    try:
        reply = _hello_call(channel)(iter(()), metadata=((HELLO_METADATA, nonce_a.hex()),), timeout=timeout)
    except grpc.RpcError as exc:
        raise (_not_ours(exc, address) or exc) from None
    return credential(token, nonce_a, reply.nonce, reply.proof, address)


async def hello_async(channel, token: str, address: str, timeout: float | None = HELLO_TIMEOUT_S,
                      wait_for_ready: bool = False) -> str:
    """``hello`` on a grpc.aio.Channel (ingest processes, relays)."""
    import grpc

    nonce_a = secrets.token_bytes(NONCE_BYTES)
    try:
        reply = await _hello_call(channel)(iter(()), metadata=((HELLO_METADATA, nonce_a.hex()),),
                                           timeout=timeout, wait_for_ready=wait_for_ready)
    except grpc.aio.AioRpcError as exc:
        raise (_not_ours(exc, address) or exc) from None
    return credential(token, nonce_a, reply.nonce, reply.proof, address)


class Sessions:
    """A caller's credentials, one per server address, renewed after RENEW_S
    or when a server refused one (``forget``). Thread-safe."""

    def __init__(self, token: str) -> None:
        self._token = token
        self._held: dict[str, tuple[str, float]] = {}
        self._lock = threading.Lock()

    def metadata(self, address: str, channel, timeout: float = HELLO_TIMEOUT_S) -> tuple[tuple[str, str], ...]:
        """The call metadata for ``address``; runs the handshake when needed
        (raises as ``hello``)."""
        with self._lock:
            held = self._held.get(address)
        if held is None or time.monotonic() - held[1] > RENEW_S:
            held = (hello(channel, self._token, address, timeout), time.monotonic())
            with self._lock:
                self._held[address] = held
        return ((SESSION_METADATA, held[0]),)

    def forget(self, address: str) -> None:
        with self._lock:
            self._held.pop(address, None)


def session_metadata(channel, token: str, address: str, timeout: float = HELLO_TIMEOUT_S
                     ) -> tuple[tuple[str, str], ...]:
    """One-shot callers (CLIs, tests): the handshake, then the metadata for
    every call on ``channel``."""
    return ((SESSION_METADATA, hello(channel, token, address, timeout)),)
