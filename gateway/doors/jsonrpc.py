"""Requests in, replies out: limits → registry → replies, for one text frame at a time.

Per connection, requests run as concurrent tasks (a slow `chat.send` never holds up `system.health`),
bounded by `server.maxInflight`; a request whose handler never waits (a plain function) is answered
at once, without a task. A reply over `server.maxReplyBytes` is answered with an error that
says to ask for less; a batch's answers that do not fit are replaced by errors asking to resend them.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any, Callable

import structlog

from .. import protocol
from ..errors import InternalError, Invalid, InvalidRequest, JarvisError, RateLimited, disk_full, out_of_descriptors
from ..registry import CallContext, MethodSpec, registry
from .connection import Connection

if TYPE_CHECKING:  # pragma: no cover
    from ..registry import ServiceAccess

log = structlog.get_logger("gateway.server")


class Dispatcher:
    def __init__(self, services: "ServiceAccess", auth_ok: Callable[[Connection], dict[str, Any]]):
        self.services = services
        self.config = services.config
        self.auth_ok = auth_ok
        self.requests: set[asyncio.Task[None]] = set()  # every request being handled

    def on_text(self, conn: Connection, text: str) -> None:
        frame = protocol.parse(text)
        if frame.auth_frame:  # already authenticated: acknowledge again, harmlessly
            conn.send_obj(protocol.notification("auth.ok", self.auth_ok(conn)))
            return
        if not frame.batch:
            if frame.errors:
                conn.send_obj(frame.errors[0])
                return
            req = frame.requests[0]
            if conn.inflight >= self.config.server.max_inflight:
                if not req.is_notification:
                    conn.send_obj(
                        protocol.error_response(
                            req.id,
                            RateLimited(
                                f"too many requests in flight on this connection (max {self.config.server.max_inflight})",
                                50,
                            ),
                        )
                    )
                return
            spec = registry.methods.get(req.method)
            if spec is not None and not spec.waits and conn.has_room_for_reply():
                # Nothing to wait for: answered here. A task per request would cost more than the handler.
                reply = self._call_now(conn, req, spec)
                if reply is not None:
                    conn.push(self._encode(conn, req, reply))
                return
            conn.inflight += 1
            self._track(conn, self._single(conn, req))
            return
        # A batch counts as many requests as it holds.
        n = max(1, len(frame.requests))
        if conn.inflight + n > self.config.server.max_inflight:
            conn.send_obj(
                protocol.error_response(
                    None,
                    RateLimited(
                        f"too many requests in flight on this connection (max {self.config.server.max_inflight})", 50
                    ),
                )
            )
            return
        conn.inflight += n
        self._track(conn, self._batch(conn, frame, n))

    def _track(self, conn: Connection, coro: Any) -> None:
        """Run a request as a task we keep hold of: shutdown waits for it before closing storage."""
        task = asyncio.create_task(coro)
        conn.tasks.add(task)
        self.requests.add(task)
        task.add_done_callback(conn.tasks.discard)
        task.add_done_callback(self.requests.discard)

    async def _single(self, conn: Connection, req: protocol.Request) -> None:
        try:
            reply = await self._call(conn, req)
            if reply is not None:
                await conn.send_reply(self._encode(conn, req, reply))
        finally:
            conn.inflight -= 1

    def _encode(self, conn: Connection, req: protocol.Request, reply: dict[str, Any]) -> bytes:
        """The reply's frame, or an error asking for less when it is over server.maxReplyBytes."""
        data = protocol.encode(reply)
        limit = self.config.server.max_reply_bytes
        if len(data) > limit:
            conn.log.warning("reply too large", method=req.method, bytes=len(data))
            data = protocol.encode(
                protocol.error_response(
                    req.id,
                    Invalid(
                        f"reply too large: {len(data)} bytes, over server.maxReplyBytes ({limit}); ask for "
                        f"less (a smaller limit, lines or k) or page through it",
                        data={"replyBytes": len(data), "maxReplyBytes": limit},
                    ),
                )
            )
        return data

    async def _batch(self, conn: Connection, frame: protocol.Frame, n: int) -> None:
        try:
            replies = await asyncio.gather(*(self._call(conn, r) for r in frame.requests))
            answers = [r for r in replies if r is not None] + frame.errors
            if answers:
                # Encoding 50 answers of megabytes takes a while: in a thread, so the loop keeps serving.
                data = (
                    self._fit_batch(conn, answers)
                    if len(answers) < 4
                    else await asyncio.to_thread(self._fit_batch, conn, answers)
                )
                await conn.send_reply(data)
        finally:
            conn.inflight -= n

    def _fit_batch(self, conn: Connection, answers: list[dict[str, Any]]) -> bytes:
        """Encode a batch's answers into one frame of at most server.maxReplyBytes: answers past the
        budget are replaced, in order, by errors asking to send that request again on its own."""
        limit = self.config.server.max_reply_bytes
        parts = [protocol.encode(a) for a in answers]
        if sum(len(p) + 1 for p in parts) + 2 <= limit:
            return b"[" + b",".join(parts) + b"]"
        stand_ins = [
            protocol.encode(
                protocol.error_response(
                    answer.get("id"),
                    InvalidRequest(
                        f"batch reply over server.maxReplyBytes ({limit}); send this request again on its own or in a "
                        f"smaller batch",
                        {"replyBytes": len(part), "maxReplyBytes": limit},
                    ),
                )
            )
            for answer, part in zip(answers, parts)
        ]
        # Room for every answer still to come as its stand-in, so the frame never passes the limit.
        room = limit - 2 - sum(len(e) + 1 for e in stand_ins)
        kept: list[bytes] = []
        for part, stand_in in zip(parts, stand_ins):
            room += len(stand_in) + 1
            if len(part) + 1 <= room:
                kept.append(part)
                room -= len(part) + 1
            else:
                kept.append(stand_in)
                room -= len(stand_in) + 1
        conn.log.warning(
            "batch reply too large", answers=len(parts), replaced=sum(1 for a, b in zip(parts, kept) if a is not b)
        )
        return b"[" + b",".join(kept) + b"]"

    async def _call(self, conn: Connection, req: protocol.Request) -> dict[str, Any] | None:
        if req.method == "auth":
            result: Any = self.auth_ok(conn)
            return None if req.is_notification else protocol.response(req.id, result)
        ctx = CallContext(self.services, conn, req.reply_id)
        try:
            with self.services.request_scope():
                result = await registry.dispatch(ctx, req.method, req.params)
        except Exception as exc:
            return self._failed(conn, req, exc)
        return None if req.is_notification else protocol.response(req.id, result)

    def _call_now(self, conn: Connection, req: protocol.Request, spec: MethodSpec) -> dict[str, Any] | None:
        """_call for a handler that never waits. No request_scope: such a handler cannot open an agent."""
        try:
            result = registry.call_now(CallContext(self.services, conn, req.reply_id), spec, req.params)
        except Exception as exc:
            return self._failed(conn, req, exc)
        return None if req.is_notification else protocol.response(req.id, result)

    def _failed(self, conn: Connection, req: protocol.Request, exc: Exception) -> dict[str, Any] | None:
        """The error answer to a request whose handler raised `exc` (None for a notification)."""
        if req.is_notification:
            return None
        if isinstance(exc, JarvisError):
            return protocol.error_response(req.id, exc)
        full = disk_full(f"the changes of {req.method}", exc)
        if full is not None:  # a cause the client can act on, not a bare "internal error"
            conn.log.warning("disk full", method=req.method, error=str(exc))
            return protocol.error_response(req.id, full)
        busy = out_of_descriptors(f"what {req.method} needs", exc)
        if busy is not None:  # sockets hold every descriptor: retry once some close
            conn.log.warning("out of file descriptors", method=req.method, error=str(exc))
            return protocol.error_response(req.id, busy)
        down = self.services.storage.unreachable(exc)
        if down is not None:
            conn.log.warning("database unreachable", method=req.method, error=str(exc)[:200])
            return protocol.error_response(req.id, down)
        error_id = uuid.uuid4().hex[:12]
        conn.log.exception("internal error", method=req.method, errorId=error_id)
        return protocol.error_response(req.id, InternalError("internal error", {"errorId": error_id}))
