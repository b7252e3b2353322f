"""The principals a gateway serves, at run time: the owner and the store's, held in memory for the
doors (`authenticate`), followed so that a principal made or revoked anywhere counts here within a
second, and made and revoked through `principals.*` (what they are: gateway/principals.py)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import time
from typing import TYPE_CHECKING, Any, Callable

import structlog

from .auth import new_token, presented
from .errors import Invalid, NotFound
from .principals import OWNER, Directory, Principal, beyond, check_name, covers, make, owner
from .tasks import log_failure
from .timeutil import now_iso

if TYPE_CHECKING:  # pragma: no cover
    from .auth import TokenStore
    from .storage.base import PrincipalStore

log = structlog.get_logger("gateway.principals")


TOUCH_EVERY_S = 60.0  # a principal's `lastUsed` is written at most this often
POLL_S = 0.5  # how often the store is asked whether its principals changed (revocations elsewhere)


class Principals:
    """The principals a gateway serves: its owner (the gateway token, `auth.TokenStore`) and the store's,
    held in a Directory and followed — the store's `version()` polled every POLL_S — so that a principal
    made or revoked anywhere (another gateway, a `jarvis token` command) counts here within a second.
    `on_revoked(digests)` is told which principals stopped being live, by identity — their tokens' digests
    (Principal.token_hash), never their names: a name revoked and given anew within one poll is another
    principal, whose old token's connections still close — so the doors close their connections."""

    def __init__(self, tokens: "TokenStore", store: "PrincipalStore"):
        self.tokens = tokens
        self.store = store
        self.directory = Directory()
        self.on_revoked: list[Callable[[set[str]], None]] = []  # told token digests (Principal.token_hash)
        self._version: str | None = None
        self._live: dict[str, str] = {}  # the live principals, as last told: token digest → name
        self._task: asyncio.Task[None] | None = None
        self._touched: dict[str, float] = {}
        self._pending: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        await self.reload()
        self._task = asyncio.create_task(self._follow())
        self._task.add_done_callback(log_failure("principals_follow_failed"))

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for t in list(self._pending):
            t.cancel()

    async def _follow(self) -> None:
        failed = 0  # polls failed in a row: the first is said, the rest counted until one works
        while True:
            await asyncio.sleep(POLL_S)
            try:
                if await self.store.version() != self._version:
                    await self.reload()
            except Exception as exc:  # the database may be down a while: keep what we have
                if not failed:
                    log.warning("principals_poll_failed", error=type(exc).__name__)
                failed += 1
            else:
                if failed:
                    log.info("principals_poll_resumed", failed=failed)
                failed = 0
            self._tell_gone()  # a token that expired since the last poll ends as a revoked one does

    async def reload(self) -> None:
        self._version = await self.store.version()
        self.directory.replace(await self.store.all())
        self._tell_gone()

    def _tell_gone(self) -> None:
        """Tell `on_revoked` which principals stopped being live (revoked, expired, gone, replaced under
        their name) since last asked: their tokens' digests."""
        live = {p.token_hash: p.name for p in self.directory.by_name.values() if p.live()}
        gone = {h for h in self._live if h not in live}
        names = sorted(self._live[h] for h in gone)
        self._live = live
        if not gone:
            return
        log.info("principals_ended", principals=names)
        for fn in self.on_revoked:
            try:
                fn(gone)
            except Exception:  # one door's failure must not keep the others' connections open
                log.exception("principals_on_revoked_failed")

    def authenticate(self, token: Any) -> Principal | None:
        """The live principal this token belongs to, else None (the owner's compared in constant time)."""
        token = presented(token)  # the one token rule (auth.py), as every door applies it
        if token is None:
            return None
        if self.tokens.check(token):
            return owner()
        p = self.directory.find(token)
        if p is not None:
            self._touch(p.name)
        return p

    def still_live(self, p: Principal) -> bool:
        """Whether `p` is still the live principal it was when its call or run began, by identity (its
        token's digest), not by name: what a revoke or an expiry ended since — here or on another gateway,
        as of the last poll — acts no more (a chat run's later tool calls, a request still in flight)."""
        if p.name == OWNER:
            return p.token_hash == ""
        now = self.directory.by_hash.get(p.token_hash)
        return (
            now is not None and now.name == p.name and hmac.compare_digest(now.token_hash, p.token_hash) and now.live()
        )

    async def by_identity(self, name: str, token_hash: str) -> Principal | None:
        """The live principal named `name` whose token's digest is `token_hash` (the owner: its name and
        no digest), else None: a principal revoked and made anew under the same name is another one. One
        made a moment ago on another gateway is looked up in the store once."""
        if name == OWNER:
            return owner() if token_hash == "" else None
        for attempt in range(2):
            p = self.directory.by_name.get(name)
            if p is not None and p.live() and hmac.compare_digest(p.token_hash, token_hash):
                return p
            if attempt == 0:
                await self.reload()
        return None

    def _touch(self, name: str) -> None:
        now = time.monotonic()
        if now - self._touched.get(name, -TOUCH_EVERY_S) < TOUCH_EVERY_S:
            return
        self._touched[name] = now
        when = now_iso()
        self.directory.touched(name, when)
        task = asyncio.ensure_future(self.store.touch(name, when))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # best effort: a failure is no error

    async def create(self, name: str, agents: Any, scopes: Any, expires: Any, by: Principal) -> tuple[Principal, str]:
        """A new principal and its token (shown once: only its hash is kept), made by `by`: never more than
        it holds (principals.beyond; Beyond names the rule)."""
        token = new_token()
        p = make(name, agents, scopes, expires, token)
        beyond(by, p.agents, p.scopes, p.expires)
        await self.store.add(p)
        await self.reload()
        return p, token

    async def revoke(self, name: str, by: Principal) -> Principal:
        """Revoke `name`, for `by`: only a principal that holds nothing beyond `by` (one it could have made);
        any other answers as a name that does not exist."""
        if name == OWNER:
            raise Invalid(
                "the owner is the gateway token's principal and the last admin: rotate its token with "
                "`jarvis token --rotate` instead",
                field="name",
            )
        check_name(name)
        if by.name != OWNER:
            found = next((p for p in await self.store.all() if p.name == name), None)
            if found is None or not covers(by, found):
                raise NotFound(f"no principal named {name!r}")
        p = await self.store.revoke(name, now_iso())
        await self.reload()
        return p

    async def list(self, by: Principal) -> list[dict[str, Any]]:
        """Every principal for the owner; for another, itself and those it could have made (covers)."""
        every = sorted(await self.store.all(), key=lambda p: p.name)
        if by.name == OWNER:
            return [owner().public()] + [p.public() for p in every]
        return [p.public() for p in every if p.name == by.name or covers(by, p)]
