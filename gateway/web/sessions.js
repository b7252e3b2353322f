// Sessions: the sidebar list (sessions.list, newest first, grouped by date, filtered by name as you type),
// new / rename / delete (sessions.create / update / delete), the open session in the URL hash (#s=<key>)
// and opening it (sessions.subscribe + sessions.history into the chat), the last session opened (reopened
// by a reload without #s=), and the drawer on narrow screens.

import { Codes, RpcError } from "./rpc.js";
import { may, narrow, rpc, state, ui } from "./state.js";
import { confirmDialog, errorMessage, formatTime, h, sessionName, showUndo, trashRow } from "./dom.js";
import { onNeedSession, renderChatShell, renderHistory, showNotice } from "./chat.js";
import { newSessionSettings } from "./settings.js";

const LAST_SESSION = "jarvis.lastSession"; // this browser's last open session, reopened on a bare reload

function rememberSession(key) {
  try {
    if (key) localStorage.setItem(LAST_SESSION, key);
    else localStorage.removeItem(LAST_SESSION);
  } catch (_) {
    /* storage disabled: a reload then starts without a session */
  }
}

function lastSession() {
  try {
    return localStorage.getItem(LAST_SESSION);
  } catch (_) {
    return null;
  }
}

// A subscription lives as long as its connection.
rpc.addEventListener("state", (ev) => {
  if (ev.detail.state !== "open") state.subscribed = null;
});

// ---- sessions ------------------------------------------------------------------------------------

/** sessions.list into the sidebar; also when a reply changed counts, order or a new session's name. */
export async function loadSessions() {
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
    const actions = [may("sessions.update") && renameBtn, may("sessions.delete") && deleteBtn].filter(Boolean);
    const li = h("li", { class: current ? "session current" : "session", "data-key": s.sessionKey },
      openBtn, h("div", { class: "session-actions" }, ...actions));
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
  const ok = await confirmDialog(`“${sessionName(session)}” and its ${session.messageCount} messages will move to the trash and leave memory search; you can restore them from the trash.`);
  if (!ok) return;
  try {
    await rpc.call("sessions.delete", { sessionKey: session.sessionKey });
    showUndo(`Deleted “${sessionName(session)}”.`, () => restoreSession(session.sessionKey));
    if (ui.sessionTrash.open) loadSessionTrash();
    state.sessions = state.sessions.filter((s) => s.sessionKey !== session.sessionKey);
    if (lastSession() === session.sessionKey) rememberSession(null);
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

/** sessions.restore: back in the list (and in memory search) whole. */
async function restoreSession(key) {
  const session = await rpc.call("sessions.restore", { sessionKey: key });
  upsertSession(session);
  if (ui.sessionTrash.open) loadSessionTrash();
  return session;
}

// ---- the trash (sessions.trash / restore / purge) ---------------------------------------------------

async function loadSessionTrash() {
  ui.sessionTrashStatus.textContent = "Loading…";
  try {
    const res = await rpc.call("sessions.trash", { limit: 200 });
    ui.sessionTrashList.replaceChildren();
    for (const s of res.sessions) {
      const name = sessionName(s);
      ui.sessionTrashList.appendChild(trashRow(s.sessionKey, name,
        `${s.messageCount} msg · deleted ${formatTime(s.deletedAt)}`, name,
        () => restoreSession(s.sessionKey).catch((err) => {
          ui.sessionTrashStatus.textContent = `Not restored: ${errorMessage(err)}`;
        }),
        () => purgeSession(s)));
    }
    ui.sessionTrashStatus.textContent = res.total
      ? `${res.total} deleted session${res.total === 1 ? "" : "s"}, kept until ${formatTime(res.sessions[res.sessions.length - 1].expiresAt)} or later.`
      : "The trash is empty.";
  } catch (err) {
    ui.sessionTrashStatus.textContent = `Could not load the trash: ${errorMessage(err)}`;
  }
}

async function purgeSession(session) {
  const ok = await confirmDialog(`“${sessionName(session)}” will be gone for good; it cannot be restored.`, "Delete forever?");
  if (!ok) return;
  try {
    await rpc.call("sessions.purge", { sessionKey: session.sessionKey });
  } catch (err) {
    ui.sessionTrashStatus.textContent = `Not deleted: ${errorMessage(err)}`;
    return;
  }
  loadSessionTrash();
}

ui.sessionTrash.addEventListener("toggle", () => {
  if (ui.sessionTrash.open) loadSessionTrash();
});

/** sessions.create, subscribed (the caller is), listed first and remembered; null when it failed (said
 * why: in the sidebar, and with `inChat` in the conversation too — where the person typed, which on a
 * phone is not the closed drawer). */
async function createSession({ inChat = false } = {}) {
  try {
    const session = await rpc.call("sessions.create", newSessionSettings());
    upsertSession(session, { toTop: true });
    if (state.subscribed) rpc.call("sessions.unsubscribe", { sessionKey: state.subscribed }).catch(() => {});
    state.subscribed = session.sessionKey; // sessions.create subscribes the caller
    rememberSession(session.sessionKey);
    ui.sessionsError.textContent = "";
    return session;
  } catch (err) {
    ui.sessionsError.textContent = `Could not create a session: ${errorMessage(err)}`;
    if (inChat) showNotice(`Not sent: could not start a session: ${errorMessage(err)}`);
    return null;
  }
}

ui.newSession.addEventListener("click", async () => {
  const session = await createSession();
  if (!session) return;
  location.hash = `s=${encodeURIComponent(session.sessionKey)}`;
  closeSidebarIfNarrow();
  ui.input.focus();
});

// Typing into the empty chat starts a session: it becomes the open one before the message is sent.
onNeedSession(async () => {
  const session = await createSession({ inChat: true });
  if (!session) return null;
  state.current = session.sessionKey;
  history.replaceState(null, "", `#s=${encodeURIComponent(session.sessionKey)}`);
  renderSessionList();
  renderChatShell(session, { keepMessages: true });
  return session.sessionKey;
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

/** Open session `key`: subscribe, read its history and show it. Until it is shown, `state.opening` holds
 * the load: a message typed meanwhile waits for it (chat.js), so that a history read before the message
 * was written never replaces the message or the reply streaming under it. */
export function openSession(key, options) {
  const opening = loadSession(key, options);
  state.opening = opening;
  opening.finally(() => {
    if (state.opening === opening) state.opening = null;
  });
  return opening;
}

async function loadSession(key, { reconnected = false } = {}) {
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
    rememberSession(key);
    upsertSession(session);
    renderChatShell(session);
    renderHistory(hist);
  } catch (err) {
    if (seq !== state.openSeq) return;
    if (err instanceof RpcError && err.code === Codes.NOT_FOUND) {
      if (lastSession() === key) rememberSession(null);
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

/** After (re)connecting: reload the list and open the session in the URL again (subscribe, history);
 * without one in the URL, the session this browser had open last, if it still exists. */
export async function resumeSessions({ reconnected }) {
  await loadSessions();
  let key = keyFromHash();
  if (!key && !state.current) {
    const last = lastSession();
    if (last && state.sessions.some((s) => s.sessionKey === last)) {
      key = last;
      history.replaceState(null, "", `#s=${encodeURIComponent(key)}`);
    }
  }
  if (key && key === state.current && !reconnected) {
    // Opened meanwhile (a session made while the list loaded): opening it again would replace what it
    // shows with a history read before its first message was written.
  } else if (key) {
    await openSession(key, { reconnected });
  } else if (!state.current) {
    renderChatShell(null);
  }
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
