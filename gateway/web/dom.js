// Small helpers the page's modules share: building DOM nodes (text only ever as textContent or text
// nodes, never markup), dates and times, session names, message text, error messages, the
// confirmation dialog and the undo toast.

import { Codes, RpcError } from "./rpc.js";
import { ui } from "./state.js";

/** h("li", {class, text, onclick, …}, ...children): an element; "text" sets textContent, "on…" adds a listener. */
export function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k in node && typeof v !== "string") node[k] = v;
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.appendChild(typeof c === "string" ? document.createTextNode(c) : c);
  }
  return node;
}

export function formatTime(iso) {
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  // Another year's date says its year (an imported conversation from 2023 is not "Mar 14").
  const day = d.getFullYear() === today.getFullYear()
    ? { month: "short", day: "numeric" }
    : { year: "numeric", month: "short", day: "numeric" };
  return sameDay
    ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })
    : d.toLocaleDateString([], day) + " " + d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

export function formatDate(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? "" : d.toLocaleDateString([], { year: "numeric", month: "short", day: "numeric" });
}

export function sessionName(s) {
  if (s && s.label) return s.label;
  return s ? "Untitled session" : "New session";
}

export function contentText(content) {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content.map((p) => (p && typeof p.text === "string" ? p.text : "")).join("");
  }
  return "";
}

export function errorMessage(err) {
  if (err instanceof RpcError) {
    if (err.code === Codes.RATE_LIMITED && err.data.retryAfterMs) {
      return `${err.message} (retry in ${Math.ceil(err.data.retryAfterMs / 1000)} s)`;
    }
    return err.message;
  }
  return String((err && err.message) || err);
}

/** Ask before something is deleted; resolves true for OK, false for Cancel, Escape or closing. */
export function confirmDialog(text, title = "Delete session?") {
  return new Promise((resolve) => {
    ui.confirmTitle.textContent = title;
    ui.confirmText.textContent = text;
    const done = (ok) => {
      ui.confirmOk.removeEventListener("click", onOk);
      ui.confirmCancel.removeEventListener("click", onCancel);
      ui.confirmDialog.removeEventListener("close", onClose);
      if (ui.confirmDialog.open) ui.confirmDialog.close();
      resolve(ok);
    };
    const onOk = (ev) => { ev.preventDefault(); done(true); };
    const onCancel = (ev) => { ev.preventDefault(); done(false); };
    const onClose = () => done(false);
    ui.confirmOk.addEventListener("click", onOk);
    ui.confirmCancel.addEventListener("click", onCancel);
    ui.confirmDialog.addEventListener("close", onClose);
    ui.confirmDialog.showModal();
    ui.confirmCancel.focus();
  });
}

const UNDO_MS = 12_000;
let undoTimer = null;
let undoAction = null;

/** "Deleted … · Undo" at the bottom of the page for a few seconds after a delete; `undo` (async) brings
 * it back. A newer one replaces it; the thing stays in the trash either way. */
export function showUndo(text, undo) {
  clearTimeout(undoTimer);
  undoAction = undo;
  ui.undoText.textContent = text;
  ui.undoButton.disabled = false;
  ui.undoToast.hidden = false;
  undoTimer = setTimeout(hideUndo, UNDO_MS);
}

function hideUndo() {
  clearTimeout(undoTimer);
  undoAction = null;
  ui.undoToast.hidden = true;
}

ui.undoButton.addEventListener("click", async () => {
  const undo = undoAction;
  if (!undo) return;
  ui.undoButton.disabled = true;
  try {
    await undo();
    hideUndo();
  } catch (err) {
    ui.undoText.textContent = `Could not undo: ${errorMessage(err)}`;
    ui.undoButton.disabled = false;
  }
});

/** One row of a trash list: what was deleted (`name`: text or a node), `meta` (when), and its Restore and
 * Delete forever buttons (`label` names it for screen readers). */
export function trashRow(key, name, meta, label, onRestore, onPurge) {
  return h("li", { class: "trash-item", "data-key": key },
    h("span", { class: "trash-name" }, name),
    h("span", { class: "hint", text: meta }),
    h("span", { class: "trash-actions" },
      h("button", { type: "button", class: "link-button", text: "Restore", "aria-label": `Restore ${label}`, onclick: onRestore }),
      h("button", {
        type: "button", class: "link-button danger-text", text: "Delete forever",
        "aria-label": `Delete ${label} forever`, onclick: onPurge,
      })));
}
