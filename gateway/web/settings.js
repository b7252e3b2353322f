// The open session's own settings, kept with it by the gateway: the model (a picker filled from
// chat.models: the upstream's /v1/models, or the configured model) and the system prompt (a dialog).
// Both go to sessions.update; with no session open they wait for the first message's sessions.create.

import { may, rpc, state, ui } from "./state.js";
import { errorMessage, h } from "./dom.js";

const pending = { model: "", systemPrompt: "" }; // chosen before the session exists

/** The settings a new session is created with (sessions.create params). */
export function newSessionSettings() {
  const out = {};
  if (pending.model) out.model = pending.model;
  if (pending.systemPrompt) out.systemPrompt = pending.systemPrompt;
  pending.model = "";
  pending.systemPrompt = "";
  return out;
}

function current() {
  return state.current ? state.sessionInfo.get(state.current) || null : null;
}

/** chat.models into the picker, once per connection. */
export async function loadModels() {
  try {
    const res = await rpc.call("chat.models");
    ui.modelPicker.replaceChildren(h("option", { value: "", text: `Default (${res.default})` }),
      ...res.models.filter((m) => m.id !== res.default).map((m) => h("option", { value: m.id, text: m.id })));
    ui.modelPicker.hidden = res.models.length < 2; // one model (offline, or no /v1/models): nothing to pick
    showSessionSettings();
  } catch (_) {
    ui.modelPicker.hidden = true; // an older gateway without chat.models: nothing to pick
  }
}

/** Show the open session's settings (or those waiting for a new one). */
export function showSessionSettings() {
  const s = current();
  const model = s ? s.model || "" : pending.model;
  if (model && ![...ui.modelPicker.options].some((o) => o.value === model)) {
    ui.modelPicker.appendChild(h("option", { value: model, text: model })); // set elsewhere, not listed upstream
    ui.modelPicker.hidden = false;
  }
  ui.modelPicker.value = model;
  const prompt = s ? s.systemPrompt || "" : pending.systemPrompt;
  // An open session's settings change with sessions.update; a key without it (a chat key) picks them
  // only for the new session it starts.
  const locked = Boolean(s) && !may("sessions.update");
  ui.modelPicker.classList.toggle("not-allowed", locked);
  ui.promptButton.classList.toggle("not-allowed", locked);
  ui.promptButton.classList.toggle("active", Boolean(prompt));
  ui.promptButton.setAttribute("aria-label", prompt ? "System prompt (this session has its own)" : "System prompt");
}

async function update(changes) {
  const s = current();
  if (!s) {
    Object.assign(pending, changes);
    showSessionSettings();
    return true;
  }
  try {
    const updated = await rpc.call("sessions.update", { sessionKey: s.sessionKey, ...changes });
    state.sessionInfo.set(updated.sessionKey, updated);
    const i = state.sessions.findIndex((x) => x.sessionKey === updated.sessionKey);
    if (i >= 0) state.sessions[i] = updated;
    showSessionSettings();
    return true;
  } catch (err) {
    ui.promptMeta.textContent = `Not saved: ${errorMessage(err)}`;
    return false;
  }
}

ui.modelPicker.addEventListener("change", async () => {
  const ok = await update({ model: ui.modelPicker.value });
  if (!ok) showSessionSettings();
});

ui.promptButton.addEventListener("click", () => {
  const s = current();
  ui.promptText.value = s ? s.systemPrompt || "" : pending.systemPrompt;
  ui.promptMeta.textContent = "Empty: the gateway's chat.systemPrompt. Used for every reply in this session.";
  ui.promptDialog.showModal();
  ui.promptText.focus();
});

ui.promptForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (await update({ systemPrompt: ui.promptText.value.trim() })) ui.promptDialog.close();
});
ui.promptReset.addEventListener("click", async () => {
  ui.promptText.value = "";
  if (await update({ systemPrompt: "" })) ui.promptDialog.close();
});
ui.promptCancel.addEventListener("click", () => ui.promptDialog.close());
