"""The web chat page in a real headless Chromium (Debian's /usr/bin/chromium) driven by Playwright.

One gateway and one browser for the whole module (a fresh browser context, hence fresh storage, per
test). The page is served with the gateway's real Content-Security-Policy, so the tests also prove that
the page works without inline scripts or styles.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import ROOT, RunningGateway, make_config

CHROMIUM = os.environ.get("JARVIS_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(
        f"BROWSER TESTS SKIPPED: Chromium not found at {CHROMIUM!r}. "
        "Install it with `apt-get install chromium chromium-driver` (scripts/test does this as root) "
        "or point JARVIS_CHROMIUM at a Chromium binary.",
        allow_module_level=True,
    )
if importlib.util.find_spec("playwright") is None:
    pytest.skip(
        "BROWSER TESTS SKIPPED: the playwright package is missing; `pip install -e .[dev]`.", allow_module_level=True
    )

import pytest_asyncio  # noqa: E402
from playwright.async_api import Browser, Page, async_playwright, expect  # noqa: E402

ARTIFACTS = ROOT / "test-artifacts"
# JARVIS_DOCS_SCREENSHOTS=1 also writes the screenshots that docs/web.md shows into docs/screenshots/.
DOCS_SHOTS = ROOT / "docs" / "screenshots" if os.environ.get("JARVIS_DOCS_SCREENSHOTS") == "1" else None
# my-laptop resolves to this machine, to open the page under a host name the gateway does not admit.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP my-laptop 127.0.0.1",
]

pytestmark = pytest.mark.asyncio(loop_scope="module")
expect.set_options(timeout=15_000)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(tmp_path_factory):
    state = tmp_path_factory.mktemp("web") / "state"
    gw = RunningGateway(
        make_config(
            state,
            memory=True,
            **{
                "memory.sync.sessionDebounceMs": 100,
                "chat.offlineDeltaDelay": 0.02,  # slow enough to watch the reply grow
            },
        )
    )
    await gw.start()
    try:
        yield gw
    finally:
        await gw.stop()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser():
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            await b.close()


class PageWatch:
    """Everything the page did that a test must not miss: JS dialogs and uncaught errors."""

    def __init__(self, page: Page):
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._on_dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))

    async def _on_dialog(self, dialog) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        await dialog.dismiss()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser, gateway: RunningGateway):
    ctx = await browser.new_context(viewport={"width": 1280, "height": 800})
    pg = await ctx.new_page()
    pg.watch = PageWatch(pg)  # type: ignore[attr-defined]
    await pg.goto(base_url(gateway))
    try:
        yield pg
    finally:
        assert pg.watch.errors == [], pg.watch.errors  # type: ignore[attr-defined]
        await ctx.close()


async def shot(page: Page, name: str) -> None:
    """A screenshot into test-artifacts/ (and docs/screenshots/ with JARVIS_DOCS_SCREENSHOTS=1)."""
    ARTIFACTS.mkdir(exist_ok=True)
    await page.screenshot(path=str(ARTIFACTS / name))
    if DOCS_SHOTS is not None:
        DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(DOCS_SHOTS / name))


def base_url(gw: RunningGateway) -> str:
    return f"http://127.0.0.1:{gw.gw.port}/"  # type: ignore[union-attr]


@contextlib.asynccontextmanager
async def signed_in(browser: Browser, gw: RunningGateway, **context):
    """A fresh browser context (viewport, permissions …) with a page signed in to `gw`; on leaving,
    the page must have raised no error and no JS dialog."""
    ctx = await browser.new_context(**context)
    try:
        pg = await ctx.new_page()
        watch = PageWatch(pg)
        await pg.goto(base_url(gw))
        await sign_in(pg, gw.token)
        yield pg
        assert watch.errors == [] and watch.dialogs == [], (watch.errors, watch.dialogs)
    finally:
        await ctx.close()


async def sign_in(page: Page, token: str, remember: bool = False) -> None:
    await page.get_by_label("Gateway token").fill(token)
    if remember:
        await page.get_by_label("Remember on this device").check()
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "open")
    await expect(page.locator("#app")).to_be_visible()


async def new_session(page: Page) -> str:
    await page.get_by_role("button", name="New session").click()
    await page.wait_for_url(re.compile(r"#s=[A-Za-z0-9._-]+$"))
    key = page.url.split("#s=", 1)[1]
    await expect(page.locator("#message-input")).to_be_enabled()
    return key


async def send(page: Page, text: str) -> None:
    box = page.get_by_label("Message", exact=True)
    await box.fill(text)
    await box.press("Enter")


def replies(page: Page):
    return page.locator("#messages .msg-assistant")


async def wait_reply(page: Page, n: int) -> None:
    """Wait until the n-th reply (1-based) has finished streaming."""
    await expect(replies(page)).to_have_count(n)
    await expect(replies(page).nth(n - 1)).not_to_have_class(re.compile(r"\bstreaming\b"))


async def test_chat_flow_streams_and_survives_reload(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    assert await page.evaluate("sessionStorage.getItem('jarvis.token')") == gateway.token
    assert await page.evaluate("localStorage.getItem('jarvis.token')") is None  # not asked to remember

    key = await new_session(page)
    await expect(page.locator("#session-list li.current")).to_have_attribute("data-key", key)

    # Record every text the reply shows while it streams (a MutationObserver sees each delta land).
    await page.evaluate("""() => {
        window.__seen = [];
        new MutationObserver(() => {
            const r = document.querySelector('#messages .msg-assistant.streaming .msg-body');
            if (r && r.textContent && window.__seen.at(-1) !== r.textContent) window.__seen.push(r.textContent);
        }).observe(document.getElementById('messages'), {subtree: true, childList: true, characterData: true});
    }""")
    await send(page, "The blue heron nests by the old mill.\nSecond line stays.")
    user = page.locator("#messages .msg-user").last
    await expect(user).to_contain_text("The blue heron nests by the old mill.")  # shown at once
    await wait_reply(page, 1)
    await expect(replies(page).first).to_contain_text(
        "You wrote: “The blue heron nests by the old mill. Second line stays.”"
    )
    seen = await page.evaluate("window.__seen")
    assert len(seen) >= 3, seen  # it grew in several steps…
    assert all(b.startswith(a) for a, b in zip(seen, seen[1:])), seen  # …each one extending the last, in order
    await expect(page.locator("#message-input")).to_have_value("")
    await expect(page.locator("#session-list li.current .session-meta")).to_contain_text("2 msg")

    # Shift+Enter makes a newline instead of sending.
    box = page.get_by_label("Message", exact=True)
    await box.type("line one")
    await box.press("Shift+Enter")
    await box.type("line two")
    await expect(box).to_have_value("line one\nline two")
    await expect(page.locator("#messages .msg-user")).to_have_count(1)
    await box.fill("")

    # Reload: the token in sessionStorage signs in again and the hash reopens the session with its history.
    await page.reload()
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "open")
    assert page.url.endswith(f"#s={key}")
    await expect(page.locator("#messages .msg-user")).to_have_count(1)
    await expect(page.locator("#messages .msg-user")).to_contain_text("The blue heron nests by the old mill.")
    await expect(replies(page)).to_have_count(1)
    await expect(replies(page).first).to_contain_text("You wrote:")

    # The session is named after its first message, in the list and the header.
    first = "The blue heron nests by the old mill."
    await expect(page.locator("#session-title")).to_have_text(first)
    await expect(page.locator("#session-list li.current .session-name")).to_have_text(first)
    # Rename the session; the new label shows in the list and the header and survives a reload.
    await page.locator("#session-list li.current").hover()  # the row's actions show under the pointer
    await page.locator("#session-list li.current").get_by_role("button", name=f"Rename {first}").click()
    await page.get_by_label("Session name").fill("Birds")
    await page.get_by_label("Session name").press("Enter")
    await expect(page.locator("#session-title")).to_have_text("Birds")
    await page.reload()
    await expect(page.locator("#session-list li.current .session-name")).to_have_text("Birds")

    await shot(page, "web-chat.png")
    assert page.watch.dialogs == []  # type: ignore[attr-defined]


async def test_memory_search_and_recalled_memories(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    key = await new_session(page)
    await send(page, "My sister Ingrid keeps seventeen lemon trees in Porto.")
    await wait_reply(page, 1)

    # The transcript is re-indexed shortly after chat.final; search until it shows up.
    await page.get_by_role("button", name="Search memory").click()
    await page.get_by_label("Query").fill("Ingrid lemon trees")
    await page.get_by_label("Source").select_option("sessions")
    result = page.locator(f"#search-results .result:has(.path[title^='sessions/{key}.jsonl:'])")
    for _ in range(40):
        await page.get_by_role("button", name="Search", exact=True).click()
        await expect(page.locator("#search-status")).not_to_have_text("Searching…")
        if await result.count():
            break
        await page.wait_for_timeout(250)
    await expect(result.first).to_be_visible()
    await expect(result.first.locator(".snippet")).to_contain_text("Ingrid")
    await expect(result.first.locator(".badge")).to_have_text("sessions")
    # Cited by the session's name and date, not sessions/<uuid>.jsonl; the file is in the tooltip.
    label = "My sister Ingrid keeps seventeen lemon trees in Porto."
    citation = re.compile(rf"^“{re.escape(label)}” · \w.* · lines? \d+(–\d+)?$")
    await expect(result.first.locator(".path")).to_have_text(citation)
    await expect(result.first.locator(".path")).to_have_attribute(
        "title", re.compile(rf"sessions/{key}\.jsonl:\d+-\d+")
    )
    await page.get_by_role("button", name="Close memory search").click()

    # The next reply recalls the earlier turn and lists it under the reply; opening it shows the lines.
    await send(page, "How many lemon trees does Ingrid have?")
    await wait_reply(page, 2)
    recalled = replies(page).nth(1).locator("details.recalled")
    await expect(recalled.locator("summary")).to_contain_text("Recalled from memory")
    await recalled.locator("summary").click()
    ref = recalled.locator("button.memory-ref", has_text=label)
    await expect(ref.first.locator(".path")).to_have_text(citation)
    await ref.first.click()
    dialog = page.get_by_role("dialog", name=re.compile(re.escape(label)))
    await expect(dialog).to_be_visible()
    await expect(dialog.locator("#memory-text")).to_contain_text(
        "user: My sister Ingrid keeps seventeen lemon trees in Porto."
    )
    await expect(dialog.locator("#memory-meta")).to_contain_text("Lines")
    await shot(page, "web-memory.png")
    await dialog.get_by_role("button", name="Close").click()
    await expect(dialog).to_be_hidden()

    # Loaded from the transcript, the reply still lists what was recalled for it.
    await page.reload()
    await expect(replies(page)).to_have_count(2)
    await expect(replies(page).nth(1).locator("details.recalled summary")).to_contain_text("Recalled from memory")


async def test_markup_in_messages_renders_as_text(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    await new_session(page)
    evil = "<img src=x onerror=alert(1)> [click](javascript:alert(2)) <script>alert(3)</script>"
    await send(page, evil)
    await wait_reply(page, 1)
    await expect(page.locator("#messages .msg-user")).to_contain_text("<img src=x onerror=alert(1)>")
    await expect(replies(page).first).to_contain_text("<img src=x onerror=alert(1)>")
    assert await page.locator("#messages img").count() == 0
    assert await page.locator("#messages script").count() == 0
    assert await page.locator("#messages a:not([href^='http'])").count() == 0  # javascript: is never a link
    assert await page.locator("#messages").get_by_role("link", name="click").count() == 0
    await page.reload()  # and the same from history
    await expect(replies(page)).to_have_count(1)
    assert await page.locator("#messages img").count() == 0
    assert page.watch.dialogs == []  # type: ignore[attr-defined]


async def test_links_and_code_render_safely(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    await new_session(page)
    await send(page, "see https://example.com/docs and `x < y`")
    await wait_reply(page, 1)
    link = replies(page).first.locator("a", has_text="https://example.com/docs")
    await expect(link).to_have_attribute("href", "https://example.com/docs")
    await expect(link).to_have_attribute("rel", "noopener noreferrer")
    await expect(replies(page).first.locator("code")).to_have_text("x < y")


async def test_wrong_token_shows_error(page: Page, gateway: RunningGateway):
    # The sign-in page names a command that works as typed in a checkout.
    await expect(page.locator("#signin-form .hint")).to_contain_text(".venv/bin/jarvis token")
    await page.get_by_label("Gateway token").fill("not-the-token")
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("alert").filter(has_text="refused")).to_be_visible()
    await expect(page.locator("#app")).to_be_hidden()
    await expect(page.get_by_label("Gateway token")).to_have_attribute("aria-invalid", "true")
    assert await page.evaluate("sessionStorage.getItem('jarvis.token')") is None
    # …and the right token then works, remembered on request.
    await sign_in(page, gateway.token, remember=True)
    assert await page.evaluate("localStorage.getItem('jarvis.token')") == gateway.token
    await page.get_by_role("button", name="Sign out").click()
    await expect(page.get_by_label("Gateway token")).to_be_visible()
    assert await page.evaluate("localStorage.getItem('jarvis.token')") is None


async def test_delete_session_asks_first(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    key = await new_session(page)
    item = page.locator(f"#session-list li[data-key='{key}']")
    await item.hover()  # the row's actions show under the pointer
    await item.get_by_role("button", name=re.compile("^Delete")).click()
    confirm = page.get_by_role("dialog", name="Delete session?")
    await expect(confirm).to_be_visible()
    await confirm.get_by_role("button", name="Cancel").click()
    await expect(item).to_have_count(1)
    await item.hover()
    await item.get_by_role("button", name=re.compile("^Delete")).click()
    await confirm.get_by_role("button", name="Delete").click()
    await expect(item).to_have_count(0)
    await expect(page.locator("#session-title")).to_have_text("New session")
    client = await gateway.client()
    try:
        keys = [s["sessionKey"] for s in (await client.call("sessions.list"))["sessions"]]
    finally:
        await client.close()
    assert key not in keys


async def test_reconnects_after_gateway_restart(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    key = await new_session(page)
    await send(page, "before the restart")
    await wait_reply(page, 1)

    await gateway.restart()  # same port, new process state: every socket is closed
    status = page.locator("#conn-status")
    await expect(status).to_have_attribute("data-state", "open")
    assert page.url.endswith(f"#s={key}")
    # Re-authenticated and re-subscribed: a new message streams its reply into this page.
    await send(page, "after the restart")
    await wait_reply(page, 2)
    await expect(replies(page).nth(1)).to_contain_text("after the restart")
    await expect(page.locator("#messages .msg-user")).to_have_count(2)


async def test_narrow_screen_drawer(browser: Browser, gateway: RunningGateway):
    ctx = await browser.new_context(viewport={"width": 360, "height": 740})
    try:
        pg = await ctx.new_page()
        await pg.goto(base_url(gateway))
        await sign_in(pg, gateway.token)
        # The offline banner starts folded to its first line on a phone; a tap unfolds it.
        await expect(pg.locator("#offline-banner")).to_be_visible()
        assert await pg.locator("#offline-details").evaluate("d => d.open") is False
        toggle = pg.get_by_role("button", name="Sessions")
        await expect(toggle).to_have_attribute("aria-expanded", "false")
        await expect(pg.get_by_role("button", name="New session")).not_to_be_in_viewport()
        await toggle.click()
        await expect(toggle).to_have_attribute("aria-expanded", "true")
        await pg.get_by_role("button", name="New session").click()
        await pg.wait_for_url(re.compile(r"#s="))
        await expect(pg.get_by_role("button", name="New session")).not_to_be_in_viewport()
        await send(pg, "hello from a phone")
        await wait_reply(pg, 1)
        width = await pg.evaluate("document.documentElement.scrollWidth")
        assert width <= 360, f"page scrolls sideways at 360 px: {width}"
        await shot(pg, "web-chat-360.png")
    finally:
        await ctx.close()


@pytest_asyncio.fixture(loop_scope="module")
async def model_gateway(tmp_path):
    """A second gateway whose chat model is a local fake OpenAI server we can make fail, crawl or call
    memory tools (memory on, proactive recall off)."""
    with FakeOpenAI() as api:
        gw = RunningGateway(
            make_config(
                tmp_path / "state",
                memory=True,
                **{
                    "chat.baseUrl": api.base_url,
                    "chat.model": "fake-model",
                    "chat.maxRetries": 0,
                    "memory.recall.enabled": False,
                },
            )
        )
        await gw.start()
        try:
            yield gw, api
        finally:
            await gw.stop()


async def test_chat_error_retry_and_stop(browser: Browser, model_gateway):
    gw, api = model_gateway
    async with signed_in(browser, gw) as pg:
        await new_session(pg)

        # The badge names the provider and model; with a model configured there is no offline banner.
        await expect(pg.locator("#model-badge")).to_have_text("openai · fake-model")
        await expect(pg.locator("#offline-banner")).to_be_hidden()

        # A failed reply is shown in place with a Retry button; retrying sends the words again.
        api.script(("status", 429, {"Retry-After": "0"}))
        api.reply = "Recovered just fine."
        await send(pg, "please answer")
        await wait_reply(pg, 1)
        failed = replies(pg).first
        await expect(failed).to_have_class(re.compile(r"\bfailed\b"))
        await expect(failed.get_by_role("alert")).to_contain_text("Reply failed")
        await failed.get_by_role("button", name="Retry").click()
        await wait_reply(pg, 2)
        await expect(replies(pg).nth(1)).to_have_text(re.compile("Recovered just fine."))
        await expect(pg.locator("#messages .msg-user")).to_have_count(2)
        await expect(failed.get_by_role("button", name="Retry")).to_have_count(0)

        # Stop: a slow reply is aborted with the button; the partial text stays, marked as stopped.
        api.reply = " ".join(f"word{i}" for i in range(200))
        api.chunk_delay = 0.05
        await send(pg, "talk for a long time")
        stop = pg.get_by_role("button", name="Stop")
        await expect(stop).to_be_enabled()
        await expect(replies(pg).nth(2)).to_contain_text("word3")
        await stop.click()
        await wait_reply(pg, 3)
        await expect(replies(pg).nth(2).locator(".stopped")).to_have_text("Stopped before it finished.")
        await expect(replies(pg).nth(2)).not_to_contain_text("word199")
        await expect(stop).to_be_hidden()
        await expect(pg.get_by_role("button", name="Send")).to_be_visible()


async def test_offline_badge_and_banner_say_how_to_configure_a_model(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    await expect(page.locator("#model-badge")).to_have_text("offline responder")
    banner = page.locator("#offline-banner")
    await expect(banner).to_be_visible()
    await expect(banner).to_contain_text("No chat model is configured")
    await expect(banner).to_contain_text("config.toml")
    await expect(banner).to_contain_text("OPENAI_BASE_URL")
    await shot(page, "web-offline.png")
    await banner.get_by_role("button", name="Dismiss").click()
    await expect(banner).to_be_hidden()
    await page.reload()
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "open")
    await expect(banner).to_be_hidden()  # for the rest of this tab's life


async def test_a_refused_origin_is_explained(browser: Browser, gateway: RunningGateway):
    ctx = await browser.new_context()
    try:
        pg = await ctx.new_page()
        watch = PageWatch(pg)
        port = gateway.gw.port  # type: ignore[union-attr]
        origin = f"http://my-laptop:{port}"
        await pg.goto(origin + "/")
        await pg.get_by_label("Gateway token").fill(gateway.token)
        await pg.get_by_role("button", name="Sign in").click()
        banner = pg.locator("#origin-banner")
        await expect(banner).to_be_visible()
        await expect(banner).to_contain_text("refused this page's origin")
        await expect(banner).to_contain_text(origin)
        await expect(banner).to_contain_text("server.allowedOrigins")
        await expect(pg.locator("#conn-status")).to_have_attribute("data-state", "blocked")
        await expect(pg.locator("#conn-text")).to_have_text("Origin refused")
        await expect(pg.locator("#signin-error")).to_contain_text("origin")
        await pg.wait_for_timeout(1500)
        await expect(pg.locator("#conn-status")).to_have_attribute("data-state", "blocked")  # no retry loop
        await shot(pg, "web-origin-refused.png")
        assert watch.errors == []
    finally:
        await ctx.close()


async def test_copy_and_regenerate_a_reply(browser: Browser, gateway: RunningGateway):
    async with signed_in(browser, gateway, permissions=["clipboard-read", "clipboard-write"]) as pg:
        await new_session(pg)
        await send(pg, "Copy me, please.")
        await wait_reply(pg, 1)
        reply = replies(pg).first
        await reply.get_by_role("button", name="Copy reply").click()
        await expect(reply.get_by_role("status")).to_have_text("Copied.")
        copied = await pg.evaluate("navigator.clipboard.readText()")
        assert copied.startswith("I am Jarvis's offline responder") and "Copy me, please." in copied

        # Regenerate: a second version of the same reply, not a second question.
        await reply.get_by_role("button", name="Regenerate reply").click()
        await expect(reply.locator(".version-count")).to_have_text("2/2")
        await expect(reply).not_to_have_class(re.compile(r"\bstreaming\b"))
        await expect(replies(pg)).to_have_count(1)
        await expect(pg.locator("#messages .msg-user")).to_have_count(1)
        await expect(reply).to_contain_text("You wrote: “Copy me, please.”")
        await reply.get_by_role("button", name="Previous version").click()
        await expect(reply.locator(".version-count")).to_have_text("1/2")
        await expect(reply.get_by_role("button", name="Previous version")).to_be_disabled()
        # After a reload the history shows the one reply with both versions and the same buttons.
        await pg.reload()
        await expect(replies(pg)).to_have_count(1)
        await expect(pg.locator("#messages .msg-user")).to_have_count(1)
        await expect(replies(pg).first.locator(".version-count")).to_have_text("2/2")
        await expect(replies(pg).first.get_by_role("button", name="Regenerate reply")).to_be_visible()
        # Only the last reply offers Regenerate.
        await send(pg, "And another question.")
        await wait_reply(pg, 2)
        await expect(replies(pg).first.get_by_role("button", name="Regenerate reply")).to_be_hidden()
        await expect(replies(pg).nth(1).get_by_role("button", name="Regenerate reply")).to_be_visible()


async def test_a_message_sent_while_its_session_opens_is_not_replaced_by_the_history(
    page: Page, gateway: RunningGateway
):
    """The sibling of resumeSessions' race, in openSession: a new session opens (its history read in
    flight) and the user sends at once. The history read before the message was written must not
    replace the message (nor the reply streaming under it). The page's WebSocket goes through a relay
    that holds the answer to that history read until the message was typed and sent."""
    hold = {"on": False}
    asked: set[int] = set()  # ids of sessions.history requests while holding
    held: list[str | bytes] = []
    holding = asyncio.Event()
    routes = []

    def relay(ws) -> None:
        server = ws.connect_to_server()
        routes.append(ws)

        def up(message: str | bytes) -> None:
            if hold["on"] and isinstance(message, str):
                frame = json.loads(message)
                if isinstance(frame, dict) and frame.get("method") == "sessions.history":
                    asked.add(frame["id"])
            server.send(message)

        def down(message: str | bytes) -> None:
            if asked and isinstance(message, str):
                frame = json.loads(message)
                if isinstance(frame, dict) and frame.get("id") in asked:
                    asked.discard(frame["id"])
                    held.append(message)
                    holding.set()
                    return
            ws.send(message)

        ws.on_message(up)
        server.on_message(down)

    await page.route_web_socket(re.compile(r"^wss?://"), relay)
    await sign_in(page, gateway.token)
    await expect(page.get_by_role("button", name="New session")).to_be_enabled()
    hold["on"] = True
    await page.get_by_role("button", name="New session").click()
    await asyncio.wait_for(holding.wait(), 15)  # the history read of the new session is answered, and held
    await send(page, "Sent while the session opens.")
    hold["on"] = False
    for message in held:
        routes[-1].send(message)
    await wait_reply(page, 1)
    user = page.locator("#messages .msg-user")
    await expect(user).to_have_count(1)
    await expect(user).to_contain_text("Sent while the session opens.")
    await expect(replies(page).first).to_contain_text("You wrote: “Sent while the session opens.”")
    # What the page shows is what the session holds.
    await page.reload()
    await expect(page.locator("#messages .msg-user")).to_have_count(1)
    await expect(replies(page)).to_have_count(1)


async def test_sidebar_search_and_date_groups(page: Page, gateway: RunningGateway):
    client = await gateway.client()
    try:
        for label in ("Tax return 2026", "Garden planning", "Tax questions for Anna"):
            await client.call("sessions.create", {"label": label})
    finally:
        await client.close()
    await sign_in(page, gateway.token)
    sidebar = page.locator("#session-list")
    await expect(sidebar.locator("li.session-group").first).to_have_text("Today")
    await page.get_by_label("Search sessions").fill("tax")
    await expect(sidebar.locator("li.session .session-name")).to_have_text(
        ["Tax questions for Anna", "Tax return 2026"]
    )
    await page.get_by_label("Search sessions").fill("no such thing")
    await expect(sidebar).to_contain_text("No session matches")
    await page.get_by_label("Search sessions").press("Escape")
    await expect(sidebar.locator("li.session", has_text="Garden planning")).to_have_count(1)


async def test_memory_panel_adds_edits_deletes_and_opens_notes(page: Page, gateway: RunningGateway):
    (gateway.config.workspace_dir / "MEMORY.md").write_text("# About me\n\nI take my coffee black.\n")
    await sign_in(page, gateway.token)
    await page.get_by_role("button", name="Memories").click()
    panel = page.locator("#search-panel")
    await expect(panel.get_by_role("heading", name="Memories", exact=True)).to_be_visible()

    await panel.get_by_role("button", name="Add memory").click()
    await panel.get_by_label("Key", exact=True).fill("bicycle")
    await panel.get_by_label("Category").select_option("facts")
    await panel.get_by_label("Text", exact=True).fill("My bicycle is a green Dutch roadster.")
    await panel.get_by_role("button", name="Save").click()
    item = panel.locator("li.memory-item[data-key='bicycle']")
    await expect(item).to_contain_text("My bicycle is a green Dutch roadster.")
    await expect(item.locator(".badge")).to_have_text("facts")
    await expect(page.locator("#memories-status")).to_contain_text("Saved bicycle.")

    await item.get_by_role("button", name="Edit memory bicycle").click()
    await expect(panel.get_by_label("Key", exact=True)).to_have_value("bicycle")
    await expect(panel.get_by_label("Text", exact=True)).to_have_value("My bicycle is a green Dutch roadster.")
    await panel.get_by_label("Text", exact=True).fill("My bicycle is a red Dutch roadster now.")
    await panel.get_by_role("button", name="Save").click()
    await expect(page.locator("#memories-status")).to_contain_text("Updated bicycle.")
    client = await gateway.client()
    try:
        assert (await client.call("memory.get", {"key": "bicycle"}))["value"].startswith("My bicycle is a red")
        await shot(page, "web-memories.png")

        await item.get_by_role("button", name="Edit memory bicycle").click()
        await panel.get_by_role("button", name="Delete").click()
        confirm = page.get_by_role("dialog", name="Delete memory?")
        await confirm.get_by_role("button", name="Delete").click()
        await expect(item).to_have_count(0)
        await expect(page.locator("#memories-status")).to_contain_text("Deleted bicycle.")
        with pytest.raises(Exception, match="-32004"):
            await client.call("memory.get", {"key": "bicycle"})
    finally:
        await client.close()

    # Notes: the workspace's files are listed; one opens in the editor, is changed and saved.
    note = panel.locator("#notes-list li[data-path='MEMORY.md']")
    await expect(note).to_contain_text("MEMORY.md")
    await expect(panel.locator("#notes-list li[data-path^='memory/keyed/']")).to_have_count(0)  # keyed: listed below
    await note.get_by_role("button", name="Edit note MEMORY.md").click()
    editor = page.get_by_role("dialog", name="MEMORY.md")
    text = editor.get_by_label("Note text")
    await expect(text).to_have_value("# About me\n\nI take my coffee black.")
    await text.fill("# About me\n\nI take my coffee with oat milk now.")
    await editor.get_by_role("button", name="Save").click()
    await expect(editor.locator("#note-meta")).to_have_text(re.compile(r"^Saved MEMORY\.md"))
    assert (
        gateway.config.workspace_dir / "MEMORY.md"
    ).read_text() == "# About me\n\nI take my coffee with oat milk now.\n"
    await shot(page, "web-notes.png")
    # Unsaved changes ask before the editor closes.
    await text.fill("scribble")
    await editor.get_by_role("button", name="Cancel").click()
    confirm = page.get_by_role("dialog", name="Discard changes?")
    await confirm.get_by_role("button", name="Cancel").click()
    await expect(text).to_have_value("scribble")
    await editor.get_by_role("button", name="Cancel").click()
    await confirm.get_by_role("button", name="Delete").click()
    await expect(editor).to_be_hidden()
    client = await gateway.client()
    try:
        found = await client.call("memory.search", {"query": "oat milk", "mode": "fts", "sources": ["memory"]})
        assert "MEMORY.md" in [r["path"] for r in found["results"]], "searchable once saved"
    finally:
        await client.close()

    # A new note by its path: created on save, then listed.
    await panel.get_by_label("Note path").fill("memory/trips/lisbon.md")
    await panel.get_by_role("button", name="Open or create").click()
    editor = page.get_by_role("dialog", name="memory/trips/lisbon.md")
    await expect(editor.locator("#note-meta")).to_have_text("A new note: it is created when you save.")
    await editor.get_by_label("Note text").fill("Tram 28 at dawn.")
    await editor.get_by_role("button", name="Save").click()
    await expect(editor.locator("#note-meta")).to_have_text(re.compile(r"^Created memory/trips/lisbon\.md"))
    await expect(panel.locator("#notes-list li[data-path='memory/trips/lisbon.md']")).to_have_count(1)
    # A path the gateway refuses is said plainly, and nothing is written.
    await editor.get_by_role("button", name="Close").click()
    await panel.get_by_label("Note path").fill("../outside.md")
    await panel.get_by_role("button", name="Open or create").click()
    editor = page.get_by_role("dialog", name="../outside.md")
    await expect(editor.locator("#note-meta")).to_contain_text("must not contain '..'")
    await expect(editor.get_by_role("button", name="Save")).to_be_disabled()


async def test_typing_into_the_empty_page_starts_a_session_and_a_bare_reload_reopens_it(
    page: Page, gateway: RunningGateway
):
    await sign_in(page, gateway.token)
    # No session open: the composer still takes a message, and says so.
    await expect(page.locator("#session-title")).to_have_text("New session")
    await expect(page.locator("#empty-state")).to_contain_text("Type a message to start a new session")
    await expect(page.locator("#message-input")).to_be_enabled()
    # Watch the header: it must show the session's name while the reply is still streaming.
    await page.evaluate("""() => {
        window.__named = null;
        new MutationObserver(() => {
            const t = document.getElementById('session-title').textContent;
            if (t.startsWith('Plant the tulips') && window.__named === null)
                window.__named = document.querySelector('#messages .msg-assistant:not(.streaming)') === null;
        }).observe(document.getElementById('session-title'), {subtree: true, childList: true, characterData: true});
    }""")
    await send(page, "Plant the tulips in October, twelve centimetres deep.")
    await page.wait_for_url(re.compile(r"#s=[A-Za-z0-9._-]+$"))
    key = page.url.split("#s=", 1)[1]
    await wait_reply(page, 1)
    label = "Plant the tulips in October, twelve centimetres deep."
    await expect(page.locator("#session-title")).to_have_text(label)
    assert await page.evaluate("window.__named") is True, "named only after the reply ended"
    await expect(page.locator(f"#session-list li[data-key='{key}'] .session-name")).to_have_text(label)

    # A reload of the bare address (no #s=) reopens the session this browser had open.
    await page.goto(base_url(gateway))
    await expect(page.locator("#conn-status")).to_have_attribute("data-state", "open")
    await page.wait_for_url(re.compile(rf"#s={re.escape(key)}$"))
    await expect(page.locator("#messages .msg-user")).to_have_text(re.compile("Plant the tulips"))
    await expect(replies(page)).to_have_count(1)


async def test_a_reply_cut_off_by_a_restart_shows_stopped_without_an_empty_bullet(page: Page, gateway: RunningGateway):
    import uuid

    from gateway.sessions import transcript as tx

    client = await gateway.client()
    try:
        key = (await client.call("sessions.create", {"label": "Cut off"}))["sessionKey"]
    finally:
        await client.close()
    # What a reply interrupted by a restart leaves in the transcript: the partial text, marked aborted.
    agent = await gateway.gw.services.agent(gateway.config.agent_id)  # type: ignore[union-attr]
    await agent.sessions.append_messages(
        key, tx.message_record(str(uuid.uuid4()), "user", "How do I plant bulbs?", "r1")
    )
    await agent.sessions.append_messages(
        key, tx.message_record(str(uuid.uuid4()), "assistant", "Three steps:\n\n- Dig a hole\n- ", "r1", aborted=True)
    )
    await page.goto(base_url(gateway) + f"#s={key}")
    await sign_in(page, gateway.token)
    reply = replies(page).first
    await expect(reply.locator(".stopped")).to_have_text("Stopped before it finished.")
    await expect(reply.locator("li")).to_have_count(1)
    await expect(reply.locator("li")).to_have_text("Dig a hole")


async def test_a_keyed_memory_result_shows_its_value_not_its_front_matter(page: Page, gateway: RunningGateway):
    client = await gateway.client()
    try:
        await client.call(
            "memory.set",
            {"key": "spare-key", "value": "The spare key hangs behind the barometer.", "category": "facts"},
        )
    finally:
        await client.close()
    await sign_in(page, gateway.token)
    await page.get_by_role("button", name="Search memory").click()
    await page.get_by_label("Query").fill("spare key barometer")
    await page.get_by_label("Source").select_option("memory")
    await page.get_by_role("button", name="Search", exact=True).click()
    result = page.locator("#search-results .result:has(.path[title^='memory/keyed/facts/spare-key.md:'])")
    await expect(result.locator(".snippet")).to_have_text("The spare key hangs behind the barometer.")
    await expect(result.locator(".path")).to_have_text(re.compile(r"^memory/keyed/facts/spare-key\.md:\d+(–\d+)?$"))


async def test_code_blocks_icon_buttons_and_a_disconnected_composer_on_a_phone(browser: Browser, model_gateway):
    gw, api = model_gateway
    async with signed_in(
        browser, gw, viewport={"width": 390, "height": 844}, permissions=["clipboard-read", "clipboard-write"]
    ) as pg:
        # The header is one row: every control in it shares the brand's line.
        header = pg.locator("header.topbar")
        rows = await header.evaluate("""h => [...h.querySelectorAll('button:not([hidden]), .brand, #model-badge, #conn-status')]
            .filter(e => e.offsetParent !== null).map(e => { const r = e.getBoundingClientRect(); return (r.top + r.bottom) / 2; })""")
        assert len(rows) >= 6 and max(rows) - min(rows) < 8, rows  # their middles on one line
        assert (await header.bounding_box())["height"] < 60
        # The placeholder fits on one line of the box.
        box = pg.get_by_label("Message", exact=True)
        await expect(box).to_have_attribute("placeholder", "Message Jarvis")
        fits = await box.evaluate("""t => { const s = getComputedStyle(t), c = document.createElement('canvas').getContext('2d');
            c.font = `${s.fontSize} ${s.fontFamily}`;
            return c.measureText(t.placeholder).width < t.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight); }""")
        assert fits

        api.reply = "Run this:\n\n```python\nprint('hello')\n```\n\nThen check."
        await send(pg, "show me code")
        await wait_reply(pg, 1)
        block = replies(pg).first.locator(".code-block")
        await expect(block.locator(".code-lang")).to_have_text("python")
        await block.get_by_role("button", name="Copy python code").click()
        await expect(block.get_by_role("status")).to_have_text("Copied.")
        assert await pg.evaluate("navigator.clipboard.readText()") == "print('hello')"
        # Copy and Regenerate are icons with tooltips, not words.
        for name, tip in (("Copy reply", "Copy the reply"), ("Regenerate reply", "Regenerate")):
            button = replies(pg).first.get_by_role("button", name=name)
            await expect(button).to_have_attribute("title", re.compile(tip))
            await expect(button).to_have_text("")
        await shot(pg, "web-chat-390.png")

        # Disconnected, the composer says why it takes nothing.
        await gw.stop()
        await expect(box).to_be_disabled()
        await expect(box).to_have_attribute(
            "placeholder", re.compile(r"^Not connected — (retrying in \d+ s|connecting…)$")
        )
        await gw.start()
        await expect(box).to_be_enabled(timeout=30_000)
        await expect(box).to_have_attribute("placeholder", "Message Jarvis")


async def test_session_actions_show_on_hover_and_score_chips_never_wrap(browser: Browser, gateway: RunningGateway):
    note = gateway.config.workspace_dir / "memory" / "projects"
    note.mkdir(parents=True, exist_ok=True)
    (note / "the-garden-shed-roof-needs-new-felt-before-the-autumn-storms.md").write_text(
        "# Shed\n\nThe garden shed roof needs new felt before the autumn storms.\n"
    )
    client = await gateway.client()
    try:

        async def indexed():
            res = await client.call("memory.search", {"query": "garden shed roof felt", "sources": ["memory"]})
            return any("garden-shed" in r["path"] for r in res["results"])

        from tests.helpers import wait_for

        await wait_for(indexed, timeout=30)
    finally:
        await client.close()
    async with signed_in(browser, gateway, viewport={"width": 1280, "height": 800}) as pg:
        key = await new_session(pg)
        await send(pg, "What does the garden shed roof need?")
        await wait_reply(pg, 1)
        # Rename and delete appear only on the row under the pointer (or with focus).
        row = pg.locator(f"#session-list li[data-key='{key}']")
        rename = row.get_by_role("button", name=re.compile("^Rename"))
        await pg.mouse.move(900, 400)
        await expect(rename).to_be_hidden()
        await row.hover()
        await expect(rename).to_be_visible()
        await pg.mouse.move(900, 400)
        await expect(rename).to_be_hidden()

        # At 390 px a long citation wraps; its score chip stays whole on one line.
        await pg.set_viewport_size({"width": 390, "height": 844})
        recalled = replies(pg).first.locator("details.recalled")
        await recalled.locator("summary").click()
        chip = recalled.locator("button.memory-ref", has_text="garden-shed").first.locator(".score")
        await expect(chip).to_be_visible()
        lines = await chip.evaluate(
            "s => s.getClientRects().length === 1 && s.getBoundingClientRect().height < 1.6 * parseFloat(getComputedStyle(s).fontSize)"
        )
        assert lines, "the score chip wrapped"


async def test_regenerate_streams_a_new_version_into_the_reply(browser: Browser, model_gateway):
    gw, api = model_gateway
    async with signed_in(browser, gw) as pg:
        key = await new_session(pg)
        api.reply = "Herons are wading birds."
        await send(pg, "What is a heron?")
        await wait_reply(pg, 1)
        reply = replies(pg).first
        api.reply = "A heron is a long-legged freshwater bird."
        await reply.get_by_role("button", name="Regenerate reply").click()
        await expect(reply.locator(".msg-body")).to_have_text("A heron is a long-legged freshwater bird.")
        await expect(reply.locator(".version-count")).to_have_text("2/2")
        await reply.get_by_role("button", name="Previous version").click()
        await expect(reply.locator(".msg-body")).to_have_text("Herons are wading birds.")
        await reply.get_by_role("button", name="Next version").click()
        await expect(reply.locator(".msg-body")).to_have_text("A heron is a long-legged freshwater bird.")
        await shot(pg, "web-regenerate.png")
        # A failed regeneration keeps both versions and says so.
        api.script(("status", 500))
        await reply.get_by_role("button", name="Regenerate reply").click()
        await expect(reply.get_by_role("alert")).to_contain_text("Regenerating failed")
        await expect(reply.locator(".version-count")).to_have_text("2/2")
        await expect(reply.locator(".msg-body")).to_have_text("A heron is a long-legged freshwater bird.")
        client = await gw.client()
        try:
            hist = (await client.call("sessions.history", {"sessionKey": key}))["messages"]
        finally:
            await client.close()
        assert [m["role"] for m in hist] == ["user", "assistant"] and len(hist[1]["versions"]) == 2


async def test_model_picker_and_system_prompt_are_kept_with_the_session(browser: Browser, model_gateway):
    gw, api = model_gateway
    async with signed_in(browser, gw) as pg:
        picker = pg.get_by_label("Model", exact=True)
        await expect(picker.locator("option")).to_have_text(["Default (fake-model)", "fake-large", "fake-small"])
        # Chosen before the first message: the session is created with them.
        await picker.select_option("fake-small")
        await pg.get_by_role("button", name="System prompt").click()
        dialog = pg.get_by_role("dialog", name="System prompt for this session")
        await dialog.get_by_label("System prompt").fill("Answer like a pirate.")
        await dialog.get_by_role("button", name="Save").click()
        await expect(dialog).to_be_hidden()
        api.reply = "Arr, herons be birds."
        await send(pg, "What is a heron?")
        await wait_reply(pg, 1)
        body = api.requests[-1]["body"]
        assert body["model"] == "fake-small" and body["messages"][0]["content"].startswith("Answer like a pirate.")
        key = pg.url.split("#s=", 1)[1]
        await shot(pg, "web-model-picker.png")

        # Kept with the session: a reload shows them; switching back to the default is stored too.
        await pg.reload()
        await expect(picker).to_have_value("fake-small")
        await expect(pg.get_by_role("button", name="System prompt (this session has its own)")).to_be_visible()
        await picker.select_option("")
        client = await gw.client()
        try:

            async def reset():
                return "model" not in await client.call("sessions.get", {"sessionKey": key})

            from tests.helpers import wait_for

            await wait_for(reset)
            assert (await client.call("sessions.get", {"sessionKey": key}))["systemPrompt"] == "Answer like a pirate."
        finally:
            await client.close()
        await send(pg, "And where do they nest?")
        await wait_reply(pg, 2)
        assert api.requests[-1]["body"]["model"] == "fake-model"
        # A new session starts with the defaults again.
        await new_session(pg)
        await expect(picker).to_have_value("")
        await expect(pg.get_by_role("button", name="System prompt", exact=True)).to_be_visible()


async def test_memory_tool_calls_show_as_one_line_each(browser: Browser, model_gateway):
    gw, api = model_gateway
    async with signed_in(browser, gw) as pg:
        await new_session(pg)
        api.script(
            ("tools", [("memory_set", {"key": "boat.colour", "value": "The boat is dark green."})]),
            ("tools", [("memory_search", {"query": "boat colour"})]),
        )
        api.reply = "Your boat is dark green."
        await send(pg, "Remember my boat is dark green")
        await wait_reply(pg, 1)
        expected = [
            '💾 memory_set "boat.colour" → stored boat.colour',
            re.compile(r'🔎 memory_search "boat colour" → \d+ results?'),
        ]
        await expect(replies(pg).first.locator(".tool-call")).to_have_text(expected)
        await expect(replies(pg).first.locator(".msg-body")).to_have_text("Your boat is dark green.")
        # History shows the same lines after a reload.
        await pg.reload()
        await expect(pg.locator("#conn-status")).to_have_attribute("data-state", "open")
        await expect(replies(pg)).to_have_count(1)
        await expect(replies(pg).first.locator(".tool-call")).to_have_text(expected)
        await expect(replies(pg).first.locator(".msg-body")).to_have_text("Your boat is dark green.")
        await shot(pg, "web-tools.png")


async def test_a_delete_offers_undo_and_the_trash_restores_or_purges(page: Page, gateway: RunningGateway):
    client = await gateway.client()
    try:
        key = (await client.call("sessions.create", {"label": "Trip to Lisbon"}))["sessionKey"]
        for value in ("The kayak is yellow.", "The kayak is orange."):
            await client.call("memory.set", {"key": "kayak", "value": value, "category": "facts"})
        await sign_in(page, gateway.token)

        # A session: deleted, then Undo in the toast; deleted again, restored from the trash; then purged.
        item = page.locator(f"#session-list li[data-key='{key}']")

        async def delete_session() -> None:
            await item.hover()
            await item.get_by_role("button", name="Delete Trip to Lisbon").click()
            await page.get_by_role("dialog", name="Delete session?").get_by_role("button", name="Delete").click()
            await expect(item).to_have_count(0)

        await delete_session()
        toast = page.locator("#undo-toast")
        await expect(toast).to_contain_text("Deleted “Trip to Lisbon”.")
        await shot(page, "web-undo.png")
        await toast.get_by_role("button", name="Undo").click()
        await expect(item).to_have_count(1)
        await expect(toast).to_be_hidden()
        assert (await client.call("sessions.get", {"sessionKey": key}))["label"] == "Trip to Lisbon"

        await delete_session()
        await page.locator("#session-trash summary").click()
        trashed = page.locator(f"#session-trash-list li[data-key='{key}']")
        await expect(trashed).to_contain_text("Trip to Lisbon")
        await trashed.get_by_role("button", name="Restore Trip to Lisbon").click()
        await expect(item).to_have_count(1)
        await expect(trashed).to_have_count(0)
        await delete_session()
        await trashed.get_by_role("button", name="Delete Trip to Lisbon forever").click()
        await page.get_by_role("dialog", name="Delete forever?").get_by_role("button", name="Delete").click()
        await expect(trashed).to_have_count(0)  # (other tests' deleted sessions may be there)
        assert key not in [t["sessionKey"] for t in (await client.call("sessions.trash"))["sessions"]]

        # A keyed memory: an earlier version restored from the form; a delete undone; the trash.
        await page.get_by_role("button", name="Memories").click()
        panel = page.locator("#search-panel")
        entry = panel.locator("li.memory-item[data-key='kayak']")
        await entry.get_by_role("button", name="Edit memory kayak").click()
        await panel.locator("#memory-history summary").click()
        # Who wrote it and how: the principal and the door, not the door alone.
        await expect(panel.locator("#memory-history li[data-version='1']")).to_contain_text("by owner via websocket")
        await panel.get_by_role("button", name="Restore version 1").click()
        await expect(page.locator("#memories-status")).to_contain_text("Restored version 1 of kayak.")
        await expect(panel.get_by_label("Text", exact=True)).to_have_value("The kayak is yellow.")
        assert (await client.call("memory.get", {"key": "kayak"}))["value"] == "The kayak is yellow."

        await panel.get_by_role("button", name="Delete").click()
        await page.get_by_role("dialog", name="Delete memory?").get_by_role("button", name="Delete").click()
        await expect(entry).to_have_count(0)
        await toast.get_by_role("button", name="Undo").click()
        await expect(entry).to_contain_text("The kayak is yellow.")
        await entry.get_by_role("button", name="Edit memory kayak").click()
        await panel.get_by_role("button", name="Delete").click()
        await page.get_by_role("dialog", name="Delete memory?").get_by_role("button", name="Delete").click()
        await panel.locator("#memory-trash summary").click()
        binned = panel.locator("#memory-trash-list li[data-key='kayak']")
        await expect(binned).to_contain_text("The kayak is yellow.")
        await shot(page, "web-trash.png")
        await binned.get_by_role("button", name="Restore memory kayak").click()
        await expect(entry).to_have_count(1)
        await expect(binned).to_have_count(0)
        found = await client.call("memory.search", {"query": "kayak yellow", "mode": "fts", "sources": ["memory"]})
        assert any("kayak" in r["path"] for r in found["results"]), "searchable again"
    finally:
        await client.close()


async def test_import_a_chatgpt_export_from_the_page(browser: Browser, tmp_path):
    """The sidebar's Import: the file goes up in pieces (admin.upload; a piece is 512 KiB, so this export
    of ~1.2 MB takes three), admin.import brings it in, and the new sessions are listed with their titles."""
    import zipfile

    import orjson

    from tests.vendor_exports import chatgpt_sample, long_chatgpt

    convs, _ = chatgpt_sample()
    convs += [long_chatgpt(f"bulk{i}", 600).json() for i in range(3)]
    path = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:  # stored: bigger than one piece
        zf.writestr("conversations.json", orjson.dumps(convs))
    assert path.stat().st_size > 2 * 512 * 1024  # three pieces
    gw = RunningGateway(make_config(tmp_path / "state", memory=True))
    await gw.start()
    try:
        async with signed_in(browser, gw) as pg:
            await pg.get_by_role("button", name="Import conversations…").click()
            dialog = pg.locator("#import-dialog")
            await expect(dialog).to_be_visible()
            await dialog.get_by_label("What it is").select_option("chatgpt")
            await dialog.get_by_label("File").set_input_files(str(path))
            await dialog.get_by_role("button", name="Import").click()
            await expect(pg.locator("#import-status")).to_contain_text("5 conversations added", timeout=60_000)
            await expect(pg.locator("#import-status")).to_contain_text("From 2023-03-14")
            await shot(pg, "web-import.png")
            await dialog.get_by_role("button", name="Close").first.click()
            await expect(pg.locator("#session-list")).to_contain_text("Voyage à Lisbonne")
            assert not list((gw.config.state_dir / "uploads").iterdir()), "the upload is gone once imported"
    finally:
        await gw.stop()


async def test_a_delete_the_model_wants_shows_allow_and_deny_on_its_tool_line(browser: Browser, model_gateway):
    gw, api = model_gateway
    client = await gw.client()
    try:
        await client.call("memory.set", {"key": "boat.colour", "value": "The boat is dark green.", "category": "facts"})
    finally:
        await client.close()
    delete = ("tools", [("memory_delete", {"key": "boat.colour"})])
    async with signed_in(browser, gw) as pg:
        await new_session(pg)
        api.script(delete)
        api.reply = "As you wish."
        await send(pg, "Forget my boat")
        ask = replies(pg).first.locator(".tool-confirm")
        await expect(ask).to_contain_text('The model wants to delete boat.colour (facts): "The boat is dark green."')
        await expect(ask.get_by_role("button", name="Deny")).to_be_focused()
        await shot(pg, "web-confirm.png")
        await ask.get_by_role("button", name="Deny").click()
        await wait_reply(pg, 1)
        await expect(replies(pg).first.locator(".tool-call")).to_have_text(['🗑️ memory_delete "boat.colour" → denied'])
        await expect(replies(pg).first.locator(".tool-confirm")).to_have_count(0)

        api.script(delete)
        await send(pg, "Forget my boat, really")
        ask = replies(pg).nth(1).locator(".tool-confirm")
        await ask.get_by_role("button", name="Allow").click()
        await wait_reply(pg, 2)
        await expect(replies(pg).nth(1).locator(".tool-call")).to_have_text(
            ['🗑️ memory_delete "boat.colour" → deleted boat.colour']
        )
    client = await gw.client()
    try:
        assert [m["key"] for m in (await client.call("memory.trash"))["memories"]] == ["boat.colour"]
    finally:
        await client.close()


async def test_devices_and_apps_make_a_token_shown_once_and_revoke_it(browser: Browser, tmp_path):
    """The owner's "Devices and apps": a token made for a phone is shown once, signs in with what its
    scopes allow (no such panel for it), and once revoked its open page is signed out at once."""
    gw = RunningGateway(make_config(tmp_path / "state"))
    await gw.start()
    try:
        async with signed_in(browser, gw) as pg:
            await pg.get_by_role("button", name="Devices and apps…").click()
            dialog = pg.locator("#devices-dialog")
            await expect(dialog).to_be_visible()
            await expect(pg.locator("#devices-list")).to_contain_text("owner")
            await dialog.get_by_label("Name").fill("phone")
            await dialog.get_by_label("Expires (30d, 12h; empty: never)").fill("30d")
            await dialog.get_by_role("button", name="Create token").click()
            await expect(pg.locator("#devices-status")).to_contain_text("shown once")
            token = await pg.locator("#devices-token-value").input_value()
            assert len(token) >= 43
            await expect(pg.locator("#devices-list")).to_contain_text("scopes read, chat")
            await shot(pg, "web-devices.png")
            await expect(dialog.locator("#devices-proxy")).to_be_visible()  # the owner gives proxy
            # An agent that does not exist is made only when asked (a typo makes no empty agent).
            await dialog.get_by_label("Name").fill("kid")
            await dialog.get_by_label("Agents (comma-separated, or *)").fill("kidz")
            await dialog.get_by_role("button", name="Create token").click()
            await expect(pg.locator("#devices-status")).to_contain_text("agent not found: kidz")
            await dialog.get_by_label("Make agents that do not exist yet").check()
            await dialog.get_by_role("button", name="Create token").click()
            await expect(pg.locator("#devices-status")).to_contain_text("Made kid")

            ctx = await browser.new_context()
            try:
                phone = await ctx.new_page()
                await phone.goto(base_url(gw))
                await sign_in(phone, token)
                await expect(phone.get_by_role("button", name="New session")).to_be_visible()
                assert await phone.locator("#devices-open").is_hidden(), "a read,chat token manages no tokens"

                await dialog.get_by_role("button", name="Revoke phone").click()
                await pg.locator("#confirm-ok").click()
                await expect(pg.locator("#devices-list")).to_contain_text("revoked")
                await expect(phone.locator("#conn-status")).not_to_have_attribute("data-state", "open", timeout=5000)
            finally:
                await ctx.close()
    finally:
        await gw.stop()


async def test_the_page_loads_without_a_console_error_and_checks_the_key_format(browser: Browser, gateway):
    """Chromium compiles `pattern` with the `v` flag: a pattern invalid there is a console error on load and
    no check at all. Load, sign in, open the memory form: not one console error, and the key's format is
    checked."""
    ctx = await browser.new_context()
    try:
        pg = await ctx.new_page()
        console: list[str] = []
        pg.on("console", lambda msg: console.append(msg.text) if msg.type == "error" else None)
        pg.on("pageerror", lambda exc: console.append(str(exc)))
        await pg.goto(base_url(gateway))
        await sign_in(pg, gateway.token)
        await pg.get_by_role("button", name="Memories").click()
        await pg.locator("#search-panel").get_by_role("button", name="Add memory").click()
        key = pg.locator("#search-panel").get_by_label("Key", exact=True)
        await key.fill("no spaces allowed")
        assert await key.evaluate("el => el.validity.patternMismatch") is True
        await key.fill("bicycle.colour_2-b")
        assert await key.evaluate("el => el.validity.valid") is True
        assert console == [], console
    finally:
        await ctx.close()


async def test_a_date_of_another_year_shows_its_year(page: Page, gateway: RunningGateway):
    await sign_in(page, gateway.token)
    shown = await page.evaluate(
        "import('/static/dom.js').then(m => [m.formatTime('2023-03-14T09:31:00Z'), "
        "m.formatTime(new Date(new Date().getFullYear(), 0, 2, 9, 31).toISOString())])"
    )
    assert "2023" in shown[0], shown
    assert str(__import__("datetime").date.today().year) not in shown[1], shown  # this year's: no year


async def test_a_model_found_on_this_machine_shows_in_the_badge_and_a_banner(browser: Browser, tmp_path):
    """Found: the badge and a banner say so. The server goes away: the reply is the offline responder's, and
    the badge and banner follow (no model answers, and why). It comes back: a reload finds it."""
    api = FakeOpenAI().__enter__()
    api.models = ["llama3.2"]
    port = int(api.base_url.rsplit(":", 1)[1].split("/")[0])
    gw = RunningGateway(make_config(tmp_path / "state", **{"chat.discover": True, "chat.discoverPorts": [port]}))
    await gw.start()
    try:
        async with signed_in(browser, gw) as pg:
            await expect(pg.locator("#model-badge")).to_have_text("a model server · llama3.2")
            banner = pg.locator("#found-banner")
            await expect(banner).to_contain_text(f"Chatting with llama3.2 on a model server at {api.base_url}")
            await expect(pg.locator("#offline-banner")).to_be_hidden()
            await banner.get_by_role("button", name="Dismiss").click()
            await expect(banner).to_be_hidden()
            await new_session(pg)
            await send(pg, "hello")
            await wait_reply(pg, 1)
            await expect(replies(pg).nth(0)).to_contain_text(api.reply)

            api.__exit__(None, None, None)  # the person quits the model server
            await send(pg, "still there?")
            await wait_reply(pg, 2)
            await expect(replies(pg).nth(1)).to_contain_text("stopped answering")
            await expect(pg.locator("#model-badge")).to_have_text("offline responder")
            offline = pg.locator("#offline-banner")
            await expect(offline).to_contain_text("No chat model answers.")
            await expect(offline).to_contain_text(
                f"The gateway looked on this machine: the model server found at {api.base_url}"
            )

            api = FakeOpenAI(port=port).__enter__()  # and starts it again
            api.models = ["llama3.2"]
            await pg.reload()
            await expect(pg.locator("#model-badge")).to_have_text("a model server · llama3.2")
            await expect(offline).to_be_hidden()
    finally:
        await gw.stop()
        api.__exit__(None, None, None)


async def test_a_phone_key_chats_and_the_page_offers_only_what_a_key_may_do(browser: Browser, tmp_path):
    """Issue 43 item 8: the README's phone key (`--scope read,chat`) on a phone-sized page starts and holds
    a conversation; what it may not do (rename, delete, import, devices, an open session's settings) is
    not offered; a read-only key is offered no composer and no New session; a refusal is said in the
    conversation where the person typed, not only in the closed drawer."""
    gw = RunningGateway(make_config(tmp_path / "state", **{"sessions.max": 2, "chat.offlineDeltaDelay": 0.0}))
    await gw.start()
    owner = await gw.client()
    try:
        phone_token = (
            await owner.call("principals.create", {"name": "phone", "agents": "main", "scopes": "read,chat"})
        )["token"]
        ro_token = (await owner.call("principals.create", {"name": "ro", "agents": "main", "scopes": "read"}))["token"]
        ctx = await browser.new_context(viewport={"width": 390, "height": 844})
        try:
            pg = await ctx.new_page()
            watch = PageWatch(pg)
            await pg.goto(base_url(gw))
            await sign_in(pg, phone_token)
            await send(pg, "hello from my phone")  # no session open: the first message starts one
            await pg.wait_for_url(re.compile(r"#s="))
            await wait_reply(pg, 1)
            await expect(pg.locator("#model-picker")).to_be_hidden()
            await expect(pg.locator("#prompt-button")).to_be_hidden()
            toggle = pg.get_by_role("button", name="Sessions")
            await toggle.click()
            await expect(pg.get_by_role("button", name="New session")).to_be_visible()
            await expect(pg.locator("#session-list .session")).to_have_count(1)
            assert await pg.locator("#session-list .session-actions button").count() == 0, "no rename or delete"
            await expect(pg.get_by_role("button", name="Import conversations…")).to_be_hidden()
            await expect(pg.get_by_role("button", name="Devices and apps…")).to_be_hidden()
            await pg.get_by_role("button", name="New session").click()  # the second of sessions.max = 2
            await pg.wait_for_url(re.compile(r"#s="))
            await send(pg, "a second conversation")
            await wait_reply(pg, 1)
            # The third is refused (sessions.max): typed into an empty chat with the drawer closed, the
            # refusal is in the conversation.
            await pg.evaluate("localStorage.removeItem('jarvis.lastSession'); history.replaceState(null, '', '/')")
            await pg.reload()
            await expect(pg.locator("#empty-state")).to_be_visible()
            await expect(pg.locator("#conn-status")).to_have_attribute("data-state", "open")
            await expect(toggle).to_have_attribute("aria-expanded", "false")
            await send(pg, "a third conversation")
            notice = pg.locator("#messages .notice.error")
            await expect(notice).to_be_visible()
            await expect(notice).to_contain_text("session limit reached")
            await expect(notice).to_be_in_viewport()
            await expect(pg.get_by_label("Message", exact=True)).to_have_value("a third conversation")
            assert watch.errors == [], watch.errors

            ro = await ctx.new_page()
            await ro.goto(base_url(gw))
            await ro.evaluate("sessionStorage.clear(); localStorage.clear()")
            await ro.reload()
            await sign_in(ro, ro_token)
            await expect(ro.locator("#composer")).to_be_hidden()
            await ro.get_by_role("button", name="Sessions").click()
            await expect(ro.get_by_role("button", name="New session")).to_be_hidden()
            await expect(ro.locator("#session-list .session")).to_have_count(2)  # it reads them
        finally:
            await ctx.close()
    finally:
        await owner.close()
        await gw.stop()


async def test_what_jarvis_believes_can_be_seen_corrected_and_forgotten(page: Page, gateway: RunningGateway):
    client = await gateway.client()
    try:
        for said in ("I live in Leeds, in a flat by the canal.", "We moved to Dundee, got the keys on Friday."):
            key = (await client.call("sessions.create", {}))["sessionKey"]
            sent = await client.call("chat.send", {"sessionKey": key, "message": said})
            await client.run_to_end(sent["runId"])
        await client.call("memory.sync", {})
    finally:
        await client.close()
    await sign_in(page, gateway.token)
    await page.get_by_role("button", name="Memories").click()
    beliefs = page.get_by_role("list", name="What Jarvis believes about you")
    home = beliefs.locator("li.belief[data-subject='home']")
    await expect(home).to_contain_text("Dundee")
    await home.locator("summary").click()
    await expect(home).to_contain_text("Leeds")  # what it was before

    await home.get_by_role("button", name="Correct home").click()
    panel = page.locator("#search-panel")
    await expect(panel.get_by_label("Key", exact=True)).to_have_value("profile.home")
    await panel.get_by_label("Text", exact=True).fill("Broughty Ferry, Dundee")
    await panel.get_by_role("button", name="Save").click()
    await expect(home).to_contain_text("Broughty Ferry, Dundee")
    await expect(home.locator(".badge")).to_have_text("your correction")

    await home.get_by_role("button", name="Forget home").click()
    await expect(home).to_have_count(0)
    await page.get_by_role("button", name="Undo").click()
    await expect(home).to_contain_text("Broughty Ferry, Dundee")  # the correction is back, its forgetting undone


async def test_what_jarvis_believes_comes_a_page_at_a_time(page: Page, gateway: RunningGateway):
    """memory.profile is bounded (50 facts a page): the panel shows the first page and "Show more"
    fetches the next, until there is none."""
    notes = gateway.config.workspace_dir / "memory"
    notes.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"The locker code for box {n} is {4000 + n}.\n" for n in range(1, 56))
    (notes / "lockers.md").write_text("# Lockers\n\n" + lines)
    client = await gateway.client()
    try:
        await client.call("memory.sync", {})
        assert len((await client.call("memory.profile", {"subject": "code", "limit": 500}))["facts"]) == 55
        total = len((await client.call("memory.profile", {"limit": 500}))["facts"])  # (the gateway is shared)
    finally:
        await client.close()
    await sign_in(page, gateway.token)
    await page.get_by_role("button", name="Memories").click()
    beliefs = page.get_by_role("list", name="What Jarvis believes about you")
    await expect(beliefs.locator("li.belief")).to_have_count(50)
    await beliefs.get_by_role("button", name="Show more of what Jarvis believes").click()
    await expect(beliefs.locator("li.belief")).to_have_count(total)
    await expect(beliefs.get_by_role("button", name="Show more of what Jarvis believes")).to_have_count(0)
