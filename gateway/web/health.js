// The model badge in the top bar (system.health: provider and model, or "offline responder") and the
// banner saying no model is configured, dismissed for the tab and folded on phones.

import { narrow, rpc, ui } from "./state.js";

const OFFLINE_DISMISSED = "jarvis.offlineBannerDismissed";

/** system.health into the model badge; the offline banner when no model is configured. */
export async function loadHealth() {
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
