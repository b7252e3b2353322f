// The chat: the open session's messages, the composer (Enter sends, Shift+Enter a new line), chat.send,
// replies streamed from chat.delta in seq order and replaced by chat.final, chat.error with Retry,
// Stop (chat.abort), Copy and Regenerate under a reply (chat.regenerate: a new version of the last reply,
// streamed into it, with a ‹ 1/2 › switcher between its versions), the memories a reply recalled, and one
// compact line per memory tool the model called (chat.tool, in seq order with the deltas), with Allow /
// Deny on it while the model asks to delete or overwrite a memory (chat.confirm).
// User text shows exactly as typed (textContent); replies go through render.js, which builds DOM nodes.

import { RpcError, randomId } from "./rpc.js";
import { renderMarkdown } from "./render.js";
import { may, narrow, rpc, state, ui } from "./state.js";
import { contentText, errorMessage, formatTime, h, sessionName } from "./dom.js";
import { citationText, openMemory } from "./memory.js";
import { showSessionSettings } from "./settings.js";

const replyViews = new WeakMap(); // reply node → its view (versions, current id)

let afterReply = () => {};
let needSession = async () => null;

/** What to do once a reply is final, or a first message named its session: the session list changed
 * (message counts, order, a new name). */
export function onReplyFinal(fn) {
  afterReply = fn;
}

/** How to start a session when a message is typed with none open: resolves to its key (null: failed). */
export function onNeedSession(fn) {
  needSession = fn;
}

let offlineReason = "Not connected to the gateway";

rpc.addEventListener("state", (ev) => {
  const { state: s, retryInMs } = ev.detail;
  offlineReason = s === "waiting" ? `Not connected — retrying in ${Math.max(1, Math.round(retryInMs / 1000))} s`
    : s === "connecting" ? "Not connected — connecting…"
      : s === "blocked" ? "Not connected — the gateway refused this page's origin"
        : "Not connected to the gateway";
  updateComposer();
});
narrow.addEventListener("change", () => updateComposer());

rpc.addEventListener("notify", (ev) => {
  const { method, params } = ev.detail;
  if (method.startsWith("chat.")) onChatEvent(method, params);
});

// ---- chat rendering ------------------------------------------------------------------------------

export function renderChatShell(session, { keepMessages = false } = {}) {
  ui.sessionTitle.textContent = sessionName(session);
  showSessionSettings();
  if (keepMessages) return updateComposer();
  ui.messages.replaceChildren();
  if (!session) {
    ui.emptyState.textContent = "Type a message to start a new session, or pick one from the list.";
    ui.messages.appendChild(ui.emptyState);
  }
  updateComposer();
}

export function renderHistory(hist) {
  ui.messages.replaceChildren();
  if (hist.hasMore) {
    ui.messages.appendChild(h("p", { class: "hint center", text: "Older messages are not shown." }));
  }
  if (!hist.messages.length) {
    ui.emptyState.textContent = "No messages yet. Say hello.";
    ui.messages.appendChild(ui.emptyState);
  }
  let calls = new Map(); // tool call id → {name, arguments} of the calls a reply made
  let lines = []; // their results, shown with the reply that follows
  for (const m of hist.messages) {
    const text = contentText(m.content);
    if (m.role === "user") {
      ui.messages.appendChild(messageView("user", text, m.timestamp).node);
      lines = [];
    } else if (m.role === "tool") {
      const call = calls.get(m.toolCallId) || {};
      lines.push({ callId: m.toolCallId, name: m.tool || call.name || "tool", arguments: call.arguments,
        status: m.error ? "error" : "ok", summary: m.summary || "" });
    } else if (m.role === "assistant" && Array.isArray(m.toolCalls) && !text) {
      for (const c of m.toolCalls) {
        let args = c.function && c.function.arguments;
        try { args = JSON.parse(args); } catch { /* shown as written */ }
        calls.set(c.id, { name: c.function && c.function.name, arguments: args });
      }
    } else if (m.role === "assistant") {
      const view = messageView("assistant", "", m.timestamp);
      for (const line of lines) toolLine(view, line);
      lines = [];
      calls = new Map();
      view.versions = Array.isArray(m.versions) && m.versions.length ? m.versions : [m];
      view.id = m.id;
      view.root = m.replaces || m.id;
      showVersion(view, view.versions.length - 1);
      ui.messages.appendChild(view.node);
    }
  }
  scrollToEnd(true);
}

/** A partial reply without its last line when that holds only a list marker or whitespace. */
function withoutDanglingLine(text) {
  return text.replace(/\n[ \t]*(?:[-*+]|\d+[.)])?[ \t]*$/, "").trimEnd();
}

/** The note under a reply that was stopped before it finished (`reason` "shutdown": by a restart). */
function stoppedNote(reason) {
  const why = reason === "shutdown" ? " The gateway restarted." : "";
  return h("p", { class: "hint stopped", text: `Stopped before it finished.${why}` });
}

/** Show version `i` of a reply: its text (a half-written last line of a stopped one left out), "stopped",
 * what it recalled, the version switcher and the actions. */
function showVersion(view, i) {
  const v = view.versions[i];
  view.index = i;
  view.node.dataset.root = view.root;
  replyViews.set(view.node, view);
  setText(view, v.aborted ? withoutDanglingLine(v.content) : v.content, true);
  for (const old of view.node.querySelectorAll(":scope > .stopped, :scope > .recalled, :scope > .msg-actions")) old.remove();
  if (v.aborted) view.node.appendChild(stoppedNote(v.abortReason));
  if (Array.isArray(v.memory) && v.memory.length) view.node.appendChild(recalledView(v.memory));
  view.node.appendChild(replyActions(view));
}

function versionSwitcher(view) {
  const n = view.versions.length;
  if (n < 2) return null;
  const go = (d) => showVersion(view, Math.min(n - 1, Math.max(0, view.index + d)));
  return h("span", { class: "versions", role: "group", "aria-label": "Versions of this reply" },
    h("button", { type: "button", class: "icon-button quiet", "aria-label": "Previous version", title: "Previous version",
      disabled: view.index === 0, onclick: () => go(-1), text: "‹" }),
    h("span", { class: "hint version-count", text: `${view.index + 1}/${n}`,
      title: view.index === n - 1 ? "The conversation goes on from this version" : "An earlier version" }),
    h("button", { type: "button", class: "icon-button quiet", "aria-label": "Next version", title: "Next version",
      disabled: view.index === n - 1, onclick: () => go(1), text: "›" }));
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
  return view;
}

function iconButton(icon, label, tooltip, onclick, extra = "") {
  return h("button", { type: "button", class: `icon-button quiet ${extra}`.trim(), "aria-label": label, title: tooltip, onclick },
    h("span", { class: `icon icon-${icon}`, "aria-hidden": "true" }));
}

/** Copy `text`, then say so in `status` for a moment. */
async function copyWithStatus(text, status) {
  status.textContent = (await copyText(text)) ? "Copied." : "Could not copy: select the text instead.";
  setTimeout(() => { status.textContent = ""; }, 2500);
}

/** Copy and Regenerate under a finished reply, as icon buttons with tooltips. */
function replyActions(view) {
  const copied = h("span", { class: "hint copied", role: "status" });
  const copy = iconButton("copy", "Copy reply", "Copy the reply", () => copyWithStatus(view.text, copied));
  const regenerate = iconButton("regenerate", "Regenerate reply", "Regenerate: ask again for another version of this reply",
    () => regenerateReply(view), "regenerate");
  return h("div", { class: "msg-actions" }, versionSwitcher(view), copy, regenerate, copied);
}

// A code block's copy button (render.js draws it; the text is its block's code).
ui.messages.addEventListener("click", (ev) => {
  const button = ev.target.closest(".code-copy");
  if (!button) return;
  const block = button.closest(".code-block");
  let status = block.querySelector(".copied");
  if (!status) status = block.querySelector(".code-head").insertBefore(h("span", { class: "hint copied", role: "status" }), button);
  copyWithStatus(block.querySelector("code").textContent, status);
});

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

/** chat.regenerate: the new version streams into this reply (the last one; the button shows on it only). */
async function regenerateReply(view) {
  if (!rpc.isOpen || !state.current || state.activeRunId || state.pendingSend) {
    showNotice("Wait until the current reply has finished, then regenerate.");
    return;
  }
  clearFailure(view);
  state.pendingSend = true;
  state.regenerating = view; // its events may arrive before the answer: they stream into this reply
  updateComposer();
  try {
    const res = await rpc.call("chat.regenerate", { sessionKey: state.current, messageId: view.id, idempotencyKey: randomId() });
    const run = ensureRun(res.runId, { ours: true });
    if (!run.done) state.activeRunId = res.runId;
  } catch (err) {
    if (state.regenerating === view) showVersion(view, view.index);
    showFailure(view, `Could not regenerate: ${errorMessage(err)}`, () => regenerateReply(view));
  } finally {
    state.regenerating = null;
    state.pendingSend = false;
    updateComposer();
  }
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

export function showNotice(text) {
  ui.messages.appendChild(h("p", { class: "notice error", role: "alert", text }));
  scrollToEnd(true);
}

const PLACEHOLDER = { wide: "Message Jarvis — Enter to send, Shift+Enter for a new line", narrow: "Message Jarvis" };

export function updateComposer() {
  const ready = rpc.isOpen; // with no session open, the first message starts one
  const running = Boolean(state.activeRunId) || state.pendingSend;
  // Disconnected, the box says why it takes nothing (the status in the top bar may be folded away).
  ui.input.placeholder = ready ? PLACEHOLDER[narrow.matches ? "narrow" : "wide"] : offlineReason;
  ui.input.disabled = !ready;
  ui.send.disabled = !ready || running || state.sendWaits;
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

ui.composer.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const text = ui.input.value;
  if (!text.trim() || ui.send.disabled) return;
  ui.input.value = "";
  const view = messageView("user", text, new Date().toISOString());
  view.node.classList.add("pending");
  removeEmptyState();
  ui.messages.appendChild(view.node);
  scrollToEnd(true);
  let key = state.current;
  while (key && state.opening) {
    // The open session's history is still being read: sent now, the message would be replaced by a
    // history read before it was written. Sent once the history is shown, below it.
    state.sendWaits = true;
    updateComposer();
    await state.opening;
    state.sendWaits = false;
    updateComposer();
    if (state.current !== key) {
      view.node.remove(); // another session was opened meanwhile: the message was not for it
      ui.input.value = ui.input.value ? `${text}\n${ui.input.value}` : text;
      return;
    }
    removeEmptyState();
    ui.messages.appendChild(view.node);
    scrollToEnd(true);
  }
  if (!key) {
    state.pendingSend = true;
    updateComposer();
    key = await needSession();
    state.pendingSend = false;
    if (!key) {
      view.node.remove();
      ui.input.value = text; // not lost: the conversation (and the sidebar) says why no session could be made
      updateComposer();
      return;
    }
  }
  sendMessage(key, text, randomId(), view);
});

async function sendMessage(sessionKey, text, idempotencyKey, userView) {
  state.pendingSend = true;
  updateComposer();
  clearFailure(userView);
  try {
    const res = await rpc.call("chat.send", { sessionKey, message: text, idempotencyKey });
    userView.node.classList.remove("pending");
    const info = state.sessionInfo.get(sessionKey);
    if (info && !info.label) afterReply(); // the first message named the session: show it now
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
  const target = ours ? state.regenerating : null;
  state.regenerating = null;
  const view = target || messageView("assistant", "", null);
  if (target) {
    clearFailure(view);
    setText(view, "", true);
  }
  view.node.classList.add("streaming");
  view.node.setAttribute("aria-busy", "true");
  removeEmptyState();
  if (!target) ui.messages.appendChild(view.node);
  run = {
    runId, view, ours, nextSeq: ours ? 1 : null, buffer: new Map(), text: "", done: false, userText: null,
    regenerating: Boolean(target),
  };
  state.runs.set(runId, run);
  if (!ours && !state.activeRunId) state.activeRunId = runId;
  updateComposer();
  return run;
}

function finishRun(run) {
  run.done = true;
  for (const ask of run.view.node.querySelectorAll(".tool-confirm")) ask.remove(); // nothing waits any more
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
  if (method === "chat.delta" || method === "chat.tool" || method === "chat.confirm") {
    if (run.nextSeq === null) run.nextSeq = p.seq; // joined mid-run (another tab, or after a reconnect)
    if (p.seq < run.nextSeq) return;
    run.buffer.set(p.seq, method === "chat.delta" ? p.delta : method === "chat.confirm" ? { confirm: p } : p);
    let changed = false;
    while (run.buffer.has(run.nextSeq)) {
      const item = run.buffer.get(run.nextSeq);
      if (typeof item === "string") {
        run.text += item;
        changed = true;
      } else if (item.confirm) {
        confirmLine(run.view, item.confirm);
      } else {
        toolLine(run.view, item);
      }
      run.buffer.delete(run.nextSeq);
      run.nextSeq += 1;
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
    const version = { id: msg.id, content: contentText(msg.content), timestamp: msg.timestamp, memory: p.memory };
    // A new version of a reply shown here (ours, or regenerated in another tab) joins that reply.
    const root = msg.replaces ? ui.messages.querySelector(`.msg-assistant[data-root="${CSS.escape(msg.replaces)}"]`) : null;
    let view = run.view;
    if (root && replyViews.has(root)) {
      if (root !== view.node) view.node.remove();
      view = replyViews.get(root);
      view.versions = [...view.versions, version];
      view.node.classList.remove("streaming");
      view.node.removeAttribute("aria-busy");
    } else {
      view.versions = [version];
      view.root = msg.replaces || msg.id;
      if (msg.timestamp) view.meta.appendChild(h("time", { datetime: msg.timestamp, text: formatTime(msg.timestamp) }));
    }
    view.id = msg.id;
    showVersion(view, view.versions.length - 1);
    finishRun(run);
    afterReply(); // message counts, order and a new session's name changed
  } else if (method === "chat.error") {
    const e = p.error || {};
    const why = `${e.message || "unknown error"}${e.retryable ? "" : " (not retryable)"}`;
    if (run.regenerating) { // the reply keeps its versions; the new one failed
      showVersion(run.view, run.view.index);
      showFailure(run.view, `Regenerating failed: ${why}`, () => regenerateReply(run.view));
      finishRun(run);
      return;
    }
    if (run.text) setText(run.view, run.text, true);
    run.view.node.classList.add("failed");
    const retry = run.userText !== null
      ? () => retryRun(run)
      : null;
    showFailure(run.view, `Reply failed: ${why}`, retry);
    finishRun(run);
  } else if (method === "chat.aborted") {
    const partial = typeof p.partial === "string" ? p.partial : run.text;
    if (run.regenerating && run.view.versions) { // kept as a version, marked stopped
      run.view.versions = [...run.view.versions, { content: partial, aborted: true, abortReason: p.reason,
        timestamp: new Date().toISOString() }];
      showVersion(run.view, run.view.versions.length - 1);
    } else {
      setText(run.view, withoutDanglingLine(partial), true);
      run.view.node.appendChild(stoppedNote(p.reason));
    }
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

// ---- memory tool calls --------------------------------------------------------------------------

const TOOL_ICONS = {
  memory_search: "🔎", memory_get: "📖", memory_set: "💾", memory_delete: "🗑️", memory_list: "📋",
  memory_recall: "🕰️",
};

/** `🔎 memory_search "boat colour" → 3 results` (as `jarvis chat` prints it; "…" while it runs). */
export function toolText(t) {
  const args = t.arguments && typeof t.arguments === "object" ? t.arguments : {};
  const main = ["query", "key", "path", "from", "category"].map((k) => args[k]).find((v) => v);
  let shown = main ? String(main).replace(/\s+/g, " ") : "";
  if (shown.length > 60) shown = shown.slice(0, 59) + "…";
  const head = `${TOOL_ICONS[t.name] || "🔧"} ${t.name}${shown ? ` "${shown}"` : ""}`;
  return t.status === "running" ? `${head} …` : `${head} → ${t.summary || t.status}`;
}

/** The question of a call that waits (chat.confirm): what it would do, Allow and Deny. The call's next
    chat.tool line replaces it; an answer too late (it timed out, the run ended) says so. */
function confirmLine(view, p) {
  const item = toolLine(view, { callId: p.callId, name: p.name, arguments: p.arguments, status: "running" });
  const status = h("span", { class: "tool-confirm-status", role: "status" });
  const answer = async (allow) => {
    for (const b of ask.querySelectorAll("button")) b.disabled = true;
    status.textContent = allow ? "Allowing…" : "Denying…";
    try {
      await rpc.call("chat.confirm", { runId: p.runId, callId: p.callId, allow });
    } catch (err) {
      // Refused (-32003: only the run's own key or one that may write its agent answers) or too late.
      const refused = err instanceof RpcError && err.code === -32003;
      status.textContent = `${refused ? "Not answered" : "Too late"}: ${errorMessage(err)}`;
    }
  };
  const buttons = may("chat.confirm") ? [
    h("button", { type: "button", class: "danger", text: "Allow", onclick: () => answer(true) }),
    h("button", { type: "button", text: "Deny", onclick: () => answer(false) }),
  ] : [];
  const ask = h("div", { class: "tool-confirm", role: "group", "aria-label": "The model asks to change memory" },
    h("span", { class: "tool-confirm-text", text: `The model wants to ${p.summary}` }),
    ...buttons,
    status);
  item.appendChild(ask);
  if (buttons.length) ask.querySelector("button:last-of-type").focus({ preventScroll: true });
  scrollToEnd();
}

/** Add or update (by callId) the line of a tool call above the reply's text. */
function toolLine(view, t) {
  let list = view.node.querySelector(".tool-calls");
  if (!list) {
    list = h("ul", { class: "tool-calls", "aria-label": "Memory tools used" });
    view.node.insertBefore(list, view.body);
  }
  let item = [...list.children].find((li) => li.dataset.callId === String(t.callId));
  if (!item) {
    item = h("li", { class: "tool-call" });
    item.dataset.callId = String(t.callId);
    list.appendChild(item);
  }
  item.textContent = toolText(t);
  item.classList.toggle("failed", t.status === "error");
  return item;
}

// ---- recalled memories ---------------------------------------------------------------------------

function recalledView(items) {
  const list = h("ul", { class: "recalled-list" });
  for (const m of items) {
    const label = h("span", { class: "path", title: `${m.path}:${m.startLine}-${m.endLine}` });
    citationText(m.path, m.startLine, m.endLine, label, m.date);
    const button = h("button", {
      type: "button", class: "memory-ref",
      onclick: () => openMemory(m.path, m.startLine, m.endLine, label.textContent),
    }, label, typeof m.score === "number" ? h("span", { class: "score", text: m.score.toFixed(2) }) : null);
    const scored = typeof m.score === "number" ? `, score ${m.score.toFixed(2)}` : "";
    const describe = () => button.setAttribute("aria-label", `Open recalled memory ${label.textContent}${scored}`);
    describe();
    new MutationObserver(describe).observe(label, { childList: true, characterData: true, subtree: true });
    list.appendChild(h("li", {}, button));
  }
  return h("details", { class: "recalled" },
    h("summary", { text: `Recalled from memory (${items.length})` }), list);
}
