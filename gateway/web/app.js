// The Jarvis web chat: sign-in, sessions, streamed chat, recalled memories, memory search, keyed memories.
// All user and model text reaches the page through textContent / DOM building (see render.js).

import { Codes, RpcError, randomId } from "./rpc.js";
import { renderMarkdown } from "./render.js";
import { citationText, openMemory } from "./memory.js";
import { narrow, rpc, state, ui } from "./state.js";
import {
  confirmDialog, contentText, errorMessage, formatDate, formatTime, h, sessionName,
} from "./dom.js";

const TOKEN_KEY = "jarvis.token";
const userTexts = new WeakMap(); // user message node → the text as typed (for Regenerate)

// ---- token storage -------------------------------------------------------------------------------

function storedToken() {
  return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY);
}

function storeToken(token, remember) {
  sessionStorage.setItem(TOKEN_KEY, token);
  if (remember) localStorage.setItem(TOKEN_KEY, token);
  else localStorage.removeItem(TOKEN_KEY);
}

function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
  localStorage.removeItem(TOKEN_KEY);
}

// ---- sign-in and connection ----------------------------------------------------------------------

function showSignin(message = "") {
  ui.app.hidden = true;
  ui.signin.hidden = false;
  ui.signOut.hidden = true;
  ui.searchToggle.hidden = true;
  ui.memoriesToggle.hidden = true;
  ui.sessionsToggle.hidden = true;
  ui.modelBadge.hidden = true;
  ui.offlineBanner.hidden = true;
  ui.signinError.textContent = message;
  ui.signinButton.disabled = false;
  ui.tokenInput.setAttribute("aria-invalid", message ? "true" : "false");
  ui.tokenInput.focus();
}

function showApp() {
  ui.signin.hidden = true;
  ui.app.hidden = false;
  ui.signOut.hidden = false;
  ui.searchToggle.hidden = false;
  ui.memoriesToggle.hidden = false;
  ui.sessionsToggle.hidden = false;
  ui.originBanner.hidden = true;
}

ui.signinForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const token = ui.tokenInput.value.trim();
  if (!token) {
    showSignin("Enter the gateway token.");
    return;
  }
  ui.signinError.textContent = "";
  ui.signinButton.disabled = true;
  pendingSignin = { token, remember: ui.rememberInput.checked };
  rpc.connect(token);
});

let pendingSignin = null; // token being tried from the form; stored only once the server accepts it

ui.signOut.addEventListener("click", () => {
  forgetToken();
  rpc.disconnect();
  state.subscribed = null;
  ui.tokenInput.value = "";
  showSignin("");
});

ui.reconnectNow.addEventListener("click", () => rpc.retryNow());

const STATE_TEXT = {
  idle: "Not connected",
  connecting: "Connecting…",
  open: "Connected",
  refused: "Signed out",
  blocked: "Origin refused",
};

rpc.addEventListener("state", (ev) => {
  const { state: s, retryInMs } = ev.detail;
  ui.connStatus.dataset.state = s;
  ui.connText.textContent = s === "waiting"
    ? `Disconnected — retrying in ${Math.max(1, Math.round(retryInMs / 1000))} s`
    : STATE_TEXT[s] || s;
  ui.reconnectNow.hidden = s !== "waiting" && s !== "blocked";
  if (s === "open") ui.originBanner.hidden = true;
  updateComposer();
  if (s !== "open") state.subscribed = null;
});

rpc.addEventListener("blocked", (ev) => {
  const origin = ev.detail.origin || location.origin;
  const own = `http://127.0.0.1:${location.port || "80"}`;
  ui.originText.textContent = ` This page is open as ${origin}, which the gateway does not admit, so it refused ` +
    `the connection. To allow it, add it to server.allowedOrigins in the gateway's config.toml ` +
    `([server] allowedOrigins = ["${origin}"]) and restart the gateway, or open the page as ${own}/.`;
  ui.originBanner.hidden = false;
  if (pendingSignin) {
    ui.signinButton.disabled = false;
    ui.signinError.textContent = "Not signed in: the gateway refused this page's origin (see above).";
  }
});

rpc.addEventListener("refused", (ev) => {
  pendingSignin = null;
  forgetToken();
  showSignin(ev.detail.message);
});

rpc.addEventListener("open", async (ev) => {
  if (pendingSignin) {
    storeToken(pendingSignin.token, pendingSignin.remember);
    pendingSignin = null;
    ui.tokenInput.value = "";
  }
  showApp();
  loadHealth();
  await loadSessions();
  const key = keyFromHash();
  if (key) {
    await openSession(key, { reconnected: ev.detail.reconnected });
  } else if (!state.current) {
    renderChatShell(null);
  }
});

rpc.addEventListener("notify", (ev) => {
  const { method, params } = ev.detail;
  if (method.startsWith("chat.")) onChatEvent(method, params);
});

// ---- the model badge and the offline banner ------------------------------------------------------

const OFFLINE_DISMISSED = "jarvis.offlineBannerDismissed";

async function loadHealth() {
  try {
    const health = await rpc.call("system.health");
    const chat = health.chat || {};
    const offline = chat.provider === "offline";
    ui.modelBadge.textContent = offline ? "offline responder" : `${chat.provider} · ${chat.model}`;
    ui.modelBadge.dataset.provider = chat.provider || "";
    ui.modelBadge.hidden = false;
    const wasHidden = ui.offlineBanner.hidden;
    ui.offlineBanner.hidden = !offline || sessionStorage.getItem(OFFLINE_DISMISSED) === "1";
    // On a phone the explanation starts folded: the first line says it all, a tap shows how to fix it.
    if (wasHidden && !ui.offlineBanner.hidden) ui.offlineDetails.open = !narrow.matches;
  } catch (_) {
    ui.modelBadge.hidden = true;
  }
}

ui.offlineDismiss.addEventListener("click", () => {
  sessionStorage.setItem(OFFLINE_DISMISSED, "1");
  ui.offlineBanner.hidden = true;
});

// ---- sessions ------------------------------------------------------------------------------------

async function loadSessions() {
  try {
    const res = await rpc.call("sessions.list", { limit: 200 });
    state.sessions = res.sessions;
    for (const s of res.sessions) state.sessionInfo.set(s.sessionKey, s);
    const current = res.sessions.find((s) => s.sessionKey === state.current);
    if (current) ui.sessionTitle.textContent = sessionName(current); // named after its first message
    ui.sessionsError.textContent = "";
  } catch (err) {
    ui.sessionsError.textContent = `Could not load sessions: ${errorMessage(err)}`;
  }
  renderSessionList();
}

function upsertSession(session, { toTop = false } = {}) {
  state.sessionInfo.set(session.sessionKey, session);
  const i = state.sessions.findIndex((s) => s.sessionKey === session.sessionKey);
  if (i >= 0) state.sessions.splice(i, 1);
  if (toTop || i < 0) state.sessions.unshift(session);
  else state.sessions.splice(i, 0, session);
  renderSessionList();
}

const DAY_MS = 24 * 60 * 60 * 1000;

/** "Today", "Yesterday", "Previous 7 days", "Previous 30 days" or the month, by the session's last change. */
function dateGroup(iso, now = new Date()) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "Older";
  const startOfToday = new Date(now.getFullYear(), now.getMonth(), now.getDate()).getTime();
  const t = d.getTime();
  if (t >= startOfToday) return "Today";
  if (t >= startOfToday - DAY_MS) return "Yesterday";
  if (t >= startOfToday - 7 * DAY_MS) return "Previous 7 days";
  if (t >= startOfToday - 30 * DAY_MS) return "Previous 30 days";
  return d.toLocaleDateString([], { year: "numeric", month: "long" });
}

function renderSessionList() {
  const list = ui.sessionList;
  list.replaceChildren();
  if (!state.sessions.length) {
    list.appendChild(h("li", { class: "hint", text: "No sessions yet." }));
    return;
  }
  const query = ui.sessionFilter.value.trim().toLowerCase();
  const shown = query
    ? state.sessions.filter((s) => sessionName(s).toLowerCase().includes(query) || s.sessionKey.toLowerCase().includes(query))
    : state.sessions;
  if (!shown.length) {
    list.appendChild(h("li", { class: "hint", text: `No session matches “${ui.sessionFilter.value.trim()}”.` }));
    return;
  }
  let group = null;
  for (const s of shown) {
    const g = dateGroup(s.updatedAt);
    if (g !== group) {
      group = g;
      list.appendChild(h("li", { class: "session-group", role: "presentation" }, h("h3", { text: g })));
    }
    const current = s.sessionKey === state.current;
    const name = sessionName(s);
    const openBtn = h("a", {
      class: "session-open",
      href: `#s=${encodeURIComponent(s.sessionKey)}`,
      "aria-current": current ? "page" : null,
      onclick: () => closeSidebarIfNarrow(),
    },
    h("span", { class: "session-name", text: name }),
    h("span", { class: "session-meta", text: `${s.messageCount} msg · ${formatTime(s.updatedAt)}` }));
    const renameBtn = h("button", {
      type: "button", class: "icon-button", "aria-label": `Rename ${name}`, title: "Rename",
      onclick: () => startRename(li, s),
    }, h("span", { class: "icon icon-pencil", "aria-hidden": "true" }));
    const deleteBtn = h("button", {
      type: "button", class: "icon-button", "aria-label": `Delete ${name}`, title: "Delete",
      onclick: () => deleteSession(s),
    }, h("span", { class: "icon icon-trash", "aria-hidden": "true" }));
    const li = h("li", { class: current ? "session current" : "session", "data-key": s.sessionKey },
      openBtn, h("div", { class: "session-actions" }, renameBtn, deleteBtn));
    list.appendChild(li);
  }
}

ui.sessionFilter.addEventListener("input", () => renderSessionList());
ui.sessionFilter.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && ui.sessionFilter.value) {
    ev.stopPropagation();
    ui.sessionFilter.value = "";
    renderSessionList();
  }
});

function startRename(li, session) {
  const input = h("input", {
    type: "text", value: session.label || "", maxlength: "200", "aria-label": "Session name",
    class: "rename-input",
  });
  const cancel = () => renderSessionList();
  const form = h("form", { class: "rename-form" }, input,
    h("button", { type: "submit", class: "primary", text: "Save" }),
    h("button", { type: "button", text: "Cancel", onclick: cancel }));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const updated = await rpc.call("sessions.update", { sessionKey: session.sessionKey, label: input.value.trim() });
      upsertSession(updated);
      if (updated.sessionKey === state.current) ui.sessionTitle.textContent = sessionName(updated);
      ui.sessionsError.textContent = "";
    } catch (err) {
      ui.sessionsError.textContent = `Rename failed: ${errorMessage(err)}`;
      renderSessionList();
    }
  });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Escape") cancel();
  });
  li.replaceChildren(form);
  input.focus();
  input.select();
}

async function deleteSession(session) {
  const ok = await confirmDialog(`“${sessionName(session)}” and its ${session.messageCount} messages will be deleted, together with what memory indexed from it.`);
  if (!ok) return;
  try {
    await rpc.call("sessions.delete", { sessionKey: session.sessionKey });
    state.sessions = state.sessions.filter((s) => s.sessionKey !== session.sessionKey);
    if (state.current === session.sessionKey) {
      state.current = null;
      state.subscribed = null;
      history.replaceState(null, "", location.pathname + location.search);
      renderChatShell(null);
    }
    renderSessionList();
    ui.newSession.focus();
  } catch (err) {
    ui.sessionsError.textContent = `Delete failed: ${errorMessage(err)}`;
  }
}

ui.newSession.addEventListener("click", async () => {
  try {
    const session = await rpc.call("sessions.create", {});
    upsertSession(session, { toTop: true });
    if (state.subscribed) rpc.call("sessions.unsubscribe", { sessionKey: state.subscribed }).catch(() => {});
    state.subscribed = session.sessionKey; // sessions.create subscribes the caller
    location.hash = `s=${encodeURIComponent(session.sessionKey)}`;
    closeSidebarIfNarrow();
    ui.input.focus();
  } catch (err) {
    ui.sessionsError.textContent = `Could not create a session: ${errorMessage(err)}`;
  }
});

function keyFromHash() {
  const m = /^#s=([A-Za-z0-9._%-]{1,400})$/.exec(location.hash);
  if (!m) return null;
  try {
    const key = decodeURIComponent(m[1]);
    return /^[A-Za-z0-9._:-]{1,128}$/.test(key) ? key : null;
  } catch (_) {
    return null;
  }
}

window.addEventListener("hashchange", () => {
  const key = keyFromHash();
  if (rpc.isOpen && key && key !== state.current) openSession(key);
});

async function openSession(key, { reconnected = false } = {}) {
  const seq = ++state.openSeq;
  const switching = key !== state.current;
  const previous = state.subscribed;
  state.current = key;
  renderSessionList();
  if (switching || reconnected) {
    state.runs.clear();
    state.activeRunId = null;
  }
  try {
    if (previous && previous !== key) {
      rpc.call("sessions.unsubscribe", { sessionKey: previous }).catch(() => {});
    }
    const [session, , hist] = await Promise.all([
      rpc.call("sessions.get", { sessionKey: key }),
      state.subscribed === key ? null : rpc.call("sessions.subscribe", { sessionKey: key }),
      rpc.call("sessions.history", { sessionKey: key, limit: 200 }),
    ]);
    if (seq !== state.openSeq) return;
    state.subscribed = key;
    upsertSession(session);
    renderChatShell(session);
    renderHistory(hist);
  } catch (err) {
    if (seq !== state.openSeq) return;
    if (err instanceof RpcError && err.code === Codes.NOT_FOUND) {
      state.current = null;
      history.replaceState(null, "", location.pathname + location.search);
      renderChatShell(null);
      ui.sessionsError.textContent = "That session no longer exists.";
      renderSessionList();
    } else {
      showNotice(`Could not open the session: ${errorMessage(err)}`);
    }
  }
}

// ---- chat rendering ------------------------------------------------------------------------------

function renderChatShell(session) {
  ui.sessionTitle.textContent = session ? sessionName(session) : "No session open";
  ui.messages.replaceChildren();
  if (!session) {
    ui.emptyState.textContent = "Create a session or pick one to start chatting.";
    ui.messages.appendChild(ui.emptyState);
  }
  updateComposer();
}

function renderHistory(hist) {
  ui.messages.replaceChildren();
  if (hist.hasMore) {
    ui.messages.appendChild(h("p", { class: "hint center", text: "Older messages are not shown." }));
  }
  if (!hist.messages.length) {
    ui.emptyState.textContent = "No messages yet. Say hello.";
    ui.messages.appendChild(ui.emptyState);
  }
  for (const m of hist.messages) {
    const text = contentText(m.content);
    if (m.role === "user") {
      ui.messages.appendChild(messageView("user", text, m.timestamp).node);
    } else if (m.role === "assistant") {
      const view = messageView("assistant", text, m.timestamp);
      if (Array.isArray(m.memory) && m.memory.length) view.node.appendChild(recalledView(m.memory));
      view.node.appendChild(replyActions(view));
      ui.messages.appendChild(view.node);
    }
  }
  scrollToEnd(true);
}

function messageView(role, text, timestamp) {
  const body = h("div", { class: "msg-body" });
  const meta = h("div", { class: "msg-meta" },
    h("span", { class: "msg-role", text: role === "user" ? "You" : "Jarvis" }),
    timestamp ? h("time", { datetime: timestamp, text: formatTime(timestamp) }) : null);
  const node = h("article", { class: `msg msg-${role}`, "aria-label": role === "user" ? "Your message" : "Reply" },
    meta, body);
  const view = { node, body, meta, text: "" };
  setText(view, text, role === "assistant");
  if (role === "user") userTexts.set(node, text);
  return view;
}

/** Copy and Regenerate under a finished reply. */
function replyActions(view) {
  const copied = h("span", { class: "hint copied", role: "status" });
  const copy = h("button", {
    type: "button", class: "link-button", text: "Copy", "aria-label": "Copy reply",
    onclick: async () => {
      copied.textContent = (await copyText(view.text)) ? "Copied." : "Could not copy: select the text instead.";
      setTimeout(() => { copied.textContent = ""; }, 2500);
    },
  });
  const regenerate = h("button", {
    type: "button", class: "link-button regenerate", text: "Regenerate", "aria-label": "Regenerate reply",
    title: "Send the message this reply answered again, for a new reply",
    onclick: () => regenerateReply(view),
  });
  return h("div", { class: "msg-actions" }, copy, regenerate, copied);
}

async function copyText(text) {
  try {
    if (navigator.clipboard && window.isSecureContext) {
      await navigator.clipboard.writeText(text);
      return true;
    }
  } catch (_) {
    /* fall back below */
  }
  // Pages opened under a plain-http host name are not a secure context: no async clipboard there.
  const area = h("textarea", { class: "visually-hidden", "aria-hidden": "true" });
  area.value = text;
  document.body.appendChild(area);
  area.select();
  let ok = false;
  try {
    ok = document.execCommand("copy");
  } catch (_) {
    ok = false;
  }
  area.remove();
  return ok;
}

function regenerateReply(view) {
  if (!rpc.isOpen || !state.current || state.activeRunId || state.pendingSend) {
    showNotice("Wait until the current reply has finished, then regenerate.");
    return;
  }
  let node = view.node.previousElementSibling;
  while (node && !userTexts.has(node)) node = node.previousElementSibling;
  if (!node) {
    showNotice("There is no message above this reply to send again.");
    return;
  }
  const text = userTexts.get(node);
  const userView = messageView("user", text, new Date().toISOString());
  userView.node.classList.add("pending");
  ui.messages.appendChild(userView.node);
  scrollToEnd(true);
  sendMessage(state.current, text, randomId(), userView);
}

function setText(view, text, markdown) {
  view.text = text;
  view.body.replaceChildren(markdown ? renderMarkdown(text) : textParagraphs(text));
}

function textParagraphs(text) {
  // User text as typed: keep line breaks, no markup interpretation at all.
  const p = h("p", { class: "plain" });
  p.textContent = text;
  return p;
}

function removeEmptyState() {
  if (ui.emptyState.parentNode) ui.emptyState.remove();
}

function nearBottom() {
  const m = ui.messages;
  return m.scrollHeight - m.scrollTop - m.clientHeight < 120;
}

function scrollToEnd(force = false) {
  if (force || nearBottom()) ui.messages.scrollTop = ui.messages.scrollHeight;
}

function showNotice(text) {
  ui.messages.appendChild(h("p", { class: "notice error", role: "alert", text }));
  scrollToEnd(true);
}

function updateComposer() {
  const ready = rpc.isOpen && Boolean(state.current);
  const running = Boolean(state.activeRunId) || state.pendingSend;
  ui.input.disabled = !ready;
  ui.send.disabled = !ready || running;
  ui.stop.hidden = !running;
  ui.stop.disabled = !rpc.isOpen || !state.activeRunId;
}

// ---- sending and streaming -----------------------------------------------------------------------

ui.input.addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) {
    ev.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.composer.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = ui.input.value;
  if (!text.trim() || ui.send.disabled) return;
  ui.input.value = "";
  const view = messageView("user", text, new Date().toISOString());
  view.node.classList.add("pending");
  removeEmptyState();
  ui.messages.appendChild(view.node);
  scrollToEnd(true);
  sendMessage(state.current, text, randomId(), view);
});

async function sendMessage(sessionKey, text, idempotencyKey, userView) {
  state.pendingSend = true;
  updateComposer();
  clearFailure(userView);
  try {
    const res = await rpc.call("chat.send", { sessionKey, message: text, idempotencyKey });
    userView.node.classList.remove("pending");
    if (sessionKey !== state.current) return;
    const run = ensureRun(res.runId, { ours: true });
    run.userText = text;
    if (!run.done) state.activeRunId = res.runId;
  } catch (err) {
    userView.node.classList.remove("pending");
    showFailure(userView, `Not sent: ${errorMessage(err)}`, () => {
      // same idempotency key: if the first attempt did reach the gateway, nothing runs twice
      sendMessage(sessionKey, text, idempotencyKey, userView);
    });
  } finally {
    state.pendingSend = false;
    updateComposer();
  }
}

function showFailure(view, message, retry) {
  clearFailure(view);
  const box = h("div", { class: "msg-error", role: "alert" },
    h("span", { text: message }),
    retry ? h("button", { type: "button", class: "retry", text: "Retry", onclick: retry }) : null);
  view.node.appendChild(box);
  view.errorBox = box;
  scrollToEnd(true);
}

function clearFailure(view) {
  if (view.errorBox) {
    view.errorBox.remove();
    view.errorBox = null;
  }
}

/** A reply being streamed. Deltas are applied strictly in seq order. */
function ensureRun(runId, { ours = false } = {}) {
  let run = state.runs.get(runId);
  if (run) return run;
  const view = messageView("assistant", "", null);
  view.node.classList.add("streaming");
  view.node.setAttribute("aria-busy", "true");
  removeEmptyState();
  ui.messages.appendChild(view.node);
  run = {
    runId, view, ours, nextSeq: ours ? 1 : null, buffer: new Map(), text: "", done: false, userText: null,
  };
  state.runs.set(runId, run);
  if (!ours && !state.activeRunId) state.activeRunId = runId;
  updateComposer();
  return run;
}

function finishRun(run) {
  run.done = true;
  run.view.node.classList.remove("streaming");
  run.view.node.removeAttribute("aria-busy");
  if (state.activeRunId === run.runId) state.activeRunId = null;
  updateComposer();
}

function onChatEvent(method, p) {
  if (!p || p.sessionKey !== state.current || !p.runId) return;
  // A run we don't know yet while our own send is in flight is ours (its events can beat the answer).
  const run = ensureRun(p.runId, { ours: state.pendingSend });
  if (run.done) return;
  if (method === "chat.delta") {
    if (run.nextSeq === null) run.nextSeq = p.seq; // joined mid-run (another tab, or after a reconnect)
    if (p.seq < run.nextSeq) return;
    run.buffer.set(p.seq, p.delta);
    let changed = false;
    while (run.buffer.has(run.nextSeq)) {
      run.text += run.buffer.get(run.nextSeq);
      run.buffer.delete(run.nextSeq);
      run.nextSeq += 1;
      changed = true;
    }
    if (changed) {
      const stick = nearBottom();
      setText(run.view, run.text, true);
      if (stick) scrollToEnd(true);
    }
    return;
  }
  const stick = nearBottom();
  if (method === "chat.final") {
    const msg = p.message || {};
    setText(run.view, contentText(msg.content), true);
    if (msg.timestamp) {
      run.view.meta.appendChild(h("time", { datetime: msg.timestamp, text: formatTime(msg.timestamp) }));
    }
    if (Array.isArray(p.memory) && p.memory.length) run.view.node.appendChild(recalledView(p.memory));
    run.view.node.appendChild(replyActions(run.view));
    finishRun(run);
    loadSessions(); // message counts, order and a new session's name changed
  } else if (method === "chat.error") {
    const e = p.error || {};
    if (run.text) setText(run.view, run.text, true);
    run.view.node.classList.add("failed");
    const retry = run.userText !== null
      ? () => retryRun(run)
      : null;
    showFailure(run.view, `Reply failed: ${e.message || "unknown error"}${e.retryable ? "" : " (not retryable)"}`, retry);
    finishRun(run);
  } else if (method === "chat.aborted") {
    const partial = typeof p.partial === "string" ? p.partial : run.text;
    setText(run.view, partial, true);
    run.view.node.appendChild(h("p", { class: "hint", text: "Stopped." }));
    finishRun(run);
  }
  if (stick) scrollToEnd(true);
}

function retryRun(run) {
  // Send the same words again as a new turn; the failed reply stays visible above.
  const text = run.userText;
  clearFailure(run.view);
  const view = messageView("user", text, new Date().toISOString());
  ui.messages.appendChild(view.node);
  sendMessage(state.current, text, randomId(), view);
}

ui.stop.addEventListener("click", async () => {
  const runId = state.activeRunId;
  if (!runId) return;
  ui.stop.disabled = true;
  try {
    await rpc.call("chat.abort", { sessionKey: state.current, runId });
  } catch (err) {
    showNotice(`Could not stop: ${errorMessage(err)}`);
    updateComposer();
  }
});

// ---- recalled memories and the memory dialog -----------------------------------------------------

function recalledView(items) {
  const list = h("ul", { class: "recalled-list" });
  for (const m of items) {
    const label = h("span", { class: "path", title: `${m.path}:${m.startLine}-${m.endLine}` });
    citationText(m.path, m.startLine, m.endLine, label);
    const button = h("button", {
      type: "button", class: "memory-ref",
      onclick: () => openMemory(m.path, m.startLine, m.endLine, label.textContent),
    }, label, h("span", { class: "score", text: Number(m.score).toFixed(2) }));
    const describe = () => button.setAttribute("aria-label",
      `Open recalled memory ${label.textContent}, score ${Number(m.score).toFixed(2)}`);
    describe();
    new MutationObserver(describe).observe(label, { childList: true, characterData: true, subtree: true });
    list.appendChild(h("li", {}, button));
  }
  return h("details", { class: "recalled" },
    h("summary", { text: `Recalled from memory (${items.length})` }), list);
}

// ---- narrow screens: the sessions drawer ---------------------------------------------------------

function setSidebarOpen(open) {
  ui.app.classList.toggle("sidebar-open", open);
  ui.sessionsToggle.setAttribute("aria-expanded", String(open));
  if (open) ui.newSession.focus();
}

function closeSidebarIfNarrow() {
  if (narrow.matches) setSidebarOpen(false);
}

ui.sessionsToggle.addEventListener("click", () => setSidebarOpen(!ui.app.classList.contains("sidebar-open")));
ui.sidebar.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape" && narrow.matches) {
    setSidebarOpen(false);
    ui.sessionsToggle.focus();
  }
});

// ---- start ---------------------------------------------------------------------------------------

const saved = storedToken();
if (saved) {
  ui.connText.textContent = "Connecting…";
  rpc.connect(saved);
} else {
  showSignin("");
}
