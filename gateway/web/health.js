// The model badge in the top bar (system.health: provider and model, or "offline responder"), the banner
// saying no model is configured or none answers (and why: where the gateway looked), dismissed for the
// tab and folded on phones, and the one saying which model server was found on this machine.

import { narrow, rpc, ui } from "./state.js";

const OFFLINE_DISMISSED = "jarvis.offlineBannerDismissed";
const FOUND_DISMISSED = "jarvis.foundBannerDismissed";

/** system.health into the model badge; the offline banner when no model is configured. */
export async function loadHealth() {
  try {
    const health = await rpc.call("system.health");
    const chat = health.chat || {};
    const offline = chat.provider === "offline";
    const where = chat.discovered ? (chat.server || "a model server") : chat.provider;
    ui.modelBadge.textContent = offline ? "offline responder" : `${where} · ${chat.model}`;
    ui.modelBadge.dataset.provider = chat.provider || "";
    ui.modelBadge.hidden = false;
    // A gateway that looks for a model server says why none answers (chat.reason); else none is configured.
    ui.offlineTitle.textContent = chat.reason ? "No chat model answers." : "No chat model is configured.";
    ui.offlineReason.textContent = chat.reason ? `The gateway looked on this machine: ${chat.reason}.` : "";
    ui.offlineReason.hidden = !chat.reason;
    ui.foundText.textContent = chat.discovered
      ? `Chatting with ${chat.model} on ${where} at ${chat.baseUrl}, found on this machine (no configuration needed).`
      : "";
    ui.foundBanner.hidden = !chat.discovered || sessionStorage.getItem(FOUND_DISMISSED) === "1";
    const wasHidden = ui.offlineBanner.hidden;
    ui.offlineBanner.hidden = !offline || sessionStorage.getItem(OFFLINE_DISMISSED) === "1";
    // On a phone the explanation starts folded: the first line says it all, a tap shows how to fix it.
    if (wasHidden && !ui.offlineBanner.hidden) ui.offlineDetails.open = !narrow.matches;
  } catch (_) {
    ui.modelBadge.hidden = true;
  }
}

ui.foundDismiss.addEventListener("click", () => {
  sessionStorage.setItem(FOUND_DISMISSED, "1");
  ui.foundBanner.hidden = true;
});

ui.offlineDismiss.addEventListener("click", () => {
  sessionStorage.setItem(OFFLINE_DISMISSED, "1");
  ui.offlineBanner.hidden = true;
});
