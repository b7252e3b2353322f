// Sign-in and the connection: the token form, where the token is kept (sessionStorage, and localStorage
// with "Remember on this device"; stored only once the gateway accepted it), sign out, a refused token,
// the connection status with Retry now, and the banner for a page origin the gateway refuses.

import { rpc, state, ui } from "./state.js";

const TOKEN_KEY = "jarvis.token";

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
  ui.foundBanner.hidden = true;
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

/** The connection opened: a token typed into the form is stored now that the gateway accepted it. */
export function signedIn() {
  if (pendingSignin) {
    storeToken(pendingSignin.token, pendingSignin.remember);
    pendingSignin = null;
    ui.tokenInput.value = "";
  }
  showApp();
}

/** On load: sign in with a stored token, else show the form. */
export function start() {
  const saved = storedToken();
  if (saved) {
    ui.connText.textContent = "Connecting…";
    rpc.connect(saved);
  } else {
    showSignin("");
  }
}
