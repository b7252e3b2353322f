// "Devices and apps" (the sidebar, for a token with the admin scope): the principals — each person,
// device or app with its own token, agents and scopes — listed (principals.list), made (principals.create:
// the token is shown here once, never again) and revoked (principals.revoke: its token stops working and
// its connections close on every gateway within a second). The button shows only for a token that may
// call principals.list (the admin scope). A key makes only keys within what it holds (its agents and
// scopes; proxy only the owner, so only the owner is offered it); an agent that does not exist is made
// only when "Make agents that do not exist yet" is ticked.

import { rpc, ui } from "./state.js";
import { confirmDialog, errorMessage, formatDate, h } from "./dom.js";

const SCOPES = ["read", "write", "chat", "admin", "proxy"];

/** Show the button when this connection's principal may manage principals (called on each open): a
 * token without the admin scope is refused principals.list (-32003). */
export async function loadDevices() {
  try {
    await rpc.call("principals.list");
    ui.devicesOpen.hidden = false;
  } catch (_) {
    ui.devicesOpen.hidden = true;
  }
}

function say(text) {
  ui.devicesStatus.textContent = text;
}

function row(p) {
  const when = p.revoked ? `revoked ${formatDate(p.revoked)}`
    : p.lastUsed ? `last used ${formatDate(p.lastUsed)}` : p.name === "owner" ? "the gateway token" : "never used";
  const meta = [`agents ${p.agents.join(", ")}`, `scopes ${p.scopes.join(", ")}`, when];
  if (p.expires && !p.revoked) meta.push(`expires ${formatDate(p.expires)}`);
  const revoke = p.name !== "owner" && !p.revoked
    ? h("button", { type: "button", class: "danger", text: "Revoke", "aria-label": `Revoke ${p.name}`,
      onclick: () => revokeOne(p.name) })
    : null;
  return h("li", { class: p.revoked ? "device revoked" : "device" },
    h("div", { class: "device-name", text: p.name }), h("div", { class: "hint", text: meta.join(" · ") }), revoke);
}

async function list() {
  try {
    const res = await rpc.call("principals.list");
    ui.devicesList.replaceChildren(...res.principals.map(row));
    // Only the owner gives proxy (and only the owner is listed to itself as "owner"): nobody else is offered it.
    const owner = res.principals.some((p) => p.name === "owner");
    ui.devicesProxy.hidden = !owner;
    if (!owner) ui.devicesProxy.querySelector("input").checked = false;
  } catch (err) {
    say(`Could not list them: ${errorMessage(err)}`);
  }
}

async function revokeOne(name) {
  if (!(await confirmDialog(`${name}'s token stops working at once, and its open connections close.`, `Revoke ${name}?`))) return;
  try {
    await rpc.call("principals.revoke", { name });
    say(`Revoked ${name}.`);
  } catch (err) {
    say(`Not revoked: ${errorMessage(err)}`);
  }
  await list();
}

ui.devicesOpen.addEventListener("click", async () => {
  say("");
  ui.devicesToken.hidden = true;
  ui.devicesDialog.showModal();
  await list();
});
ui.devicesClose.addEventListener("click", () => ui.devicesDialog.close());

ui.devicesForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const scopes = SCOPES.filter((s) => ui.devicesForm.querySelector(`input[name=scope][value=${s}]`).checked);
  const params = { name: ui.devicesName.value.trim(), agents: ui.devicesAgents.value.trim() || "*", scopes: scopes.join(",") };
  const expires = ui.devicesExpires.value.trim();
  if (expires) params.expires = expires;
  if (ui.devicesNewAgent.checked) params.createAgents = true; // else an unknown agent is refused (a typo)
  try {
    const res = await rpc.call("principals.create", params);
    ui.devicesTokenValue.value = res.token;
    ui.devicesToken.hidden = false;
    say(`Made ${res.principal.name}. Its token is shown once: copy it now.`);
    ui.devicesName.value = "";
    ui.devicesTokenValue.select();
  } catch (err) {
    ui.devicesToken.hidden = true;
    say(`Not made: ${errorMessage(err)}`);
  }
  await list();
});
