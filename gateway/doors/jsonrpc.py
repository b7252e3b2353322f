"""The WebSocket's JSON-RPC door: each text frame's requests as calls of the one path
(dispatcher.py), each call's result or error value as a JSON-RPC reply.

Per connection, requests run as concurrent tasks (a slow `chat.send` never holds up `system.health`),
bounded by `server.maxInflight` (taken through the dispatcher); a request whose handler never waits (a
plain function) is answered at once, without a task. A reply over `server.maxReplyBytes` is answered
with an error that says to ask for less; a batch's answers that do not fit are replaced by errors
asking to resend them.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Callable

from .. import protocol
from ..calls import Call, Door
from ..errors import Invalid, InvalidRequest, JarvisError
from .connection import Connection

if TYPE_CHECKING:  # pragma: no cover
    from ..calls import ServiceAccess
    from ..dispatcher import Dispatcher
    from ..registry import MethodSpec


class JsonRpcDoor:
    def __init__(self, services: "ServiceAccess", auth_ok: Callable[[Connection], dict[str, Any]]):
        self.calls: "Dispatcher" = services.calls
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
            try:
                self.calls.reserve(conn)
            except JarvisError as exc:  # over the connection's requests in flight
                if not req.is_notification:
                    conn.send_obj(protocol.error_response(req.id, exc))
                return
            call = self._call_of(conn, req)
            spec = self._answered_now(call)
            if spec is not None and conn.has_room_for_reply():
                # Nothing to wait for: answered here. A task per request would cost more than the handler.
                try:
                    reply = self._reply(req, lambda: self.calls.perform_now(call, spec))
                finally:
                    self.calls.release(conn)
                if reply is not None:
                    conn.push(self._encode(conn, req, reply))
                return
            self._track(conn, self._single(conn, req))
            return
        # A batch counts as many requests as it holds.
        n = max(1, len(frame.requests))
        try:
            self.calls.reserve(conn, n)
        except JarvisError as exc:
            conn.send_obj(protocol.error_response(None, exc))
            return
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
            self.calls.release(conn)

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
            self.calls.release(conn, n)

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

    def _answered_now(self, call: Call) -> "MethodSpec | None":
        """The method of `call` when its handler never waits (answered without a task), else None."""
        try:
            spec = self.calls.find(call)
        except JarvisError:  # no such method: the task's call says so
            return None
        return None if spec.waits else spec

    def _call_of(self, conn: Connection, req: protocol.Request) -> Call:
        principal = conn.principal
        if principal is None:  # (never: the handshake admits a connection only with its principal)
            raise RuntimeError("a call on a connection that has not authenticated")
        return Call(Door.WEBSOCKET, req.method, req.params, principal, connection=conn, request_id=req.reply_id)

    async def _call(self, conn: Connection, req: protocol.Request) -> dict[str, Any] | None:
        if req.method == "auth":
            result: Any = self.auth_ok(conn)
            return None if req.is_notification else protocol.response(req.id, result)
        try:
            result = await self.calls.perform(self._call_of(conn, req))
        except JarvisError as exc:
            return None if req.is_notification else protocol.error_response(req.id, exc)
        return None if req.is_notification else protocol.response(req.id, result)

    @staticmethod
    def _reply(req: protocol.Request, run: Callable[[], Any]) -> dict[str, Any] | None:
        """The answer to `req` of a call made now (None for a notification)."""
        try:
            result = run()
        except JarvisError as exc:
            return None if req.is_notification else protocol.error_response(req.id, exc)
        return None if req.is_notification else protocol.response(req.id, result)
