// Import from the page (the sidebar's "Import conversations…"): the chosen file is read in pieces
// (File.slice), sent to the gateway with admin.upload — a frame holds 1 MiB, an export hundreds of MB —
// then imported with admin.import {source, upload}. The bar shows the upload, then the gateway's
// admin.import.progress notifications; the dialog ends with what came in.

import { rpc, ui } from "./state.js";
import { errorMessage } from "./dom.js";

const PIECE = 512 * 1024; // bytes a piece (the gateway takes at most this much decoded)
const IMPORT_TIMEOUT_MS = 60 * 60 * 1000; // a big export with its indexing: as long as it takes, within reason
let running = false;
let onImported = () => {};

/** Call `fn` after an import added something (app.js: reload the sessions list). */
export function whenImported(fn) {
  onImported = fn;
}

function toBase64(buffer) {
  const bytes = new Uint8Array(buffer);
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function show(text, fraction = null) {
  ui.importStatus.textContent = text;
  ui.importProgress.hidden = fraction === null;
  if (fraction !== null) ui.importProgress.value = Math.max(0, Math.min(1, fraction));
}

const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

async function upload(file) {
  let uploadId = null;
  let offset = 0;
  do {
    const piece = await file.slice(offset, offset + PIECE).arrayBuffer();
    const params = { offset, data: toBase64(piece) };
    if (uploadId) params.uploadId = uploadId;
    else params.name = file.name;
    const res = await rpc.call("admin.upload", params, { timeoutMs: 120000 });
    uploadId = res.uploadId;
    offset = res.bytes;
    show(`Sending ${file.name}: ${mb(offset)} of ${mb(file.size)}`, file.size ? offset / file.size : 1);
  } while (offset < file.size);
  return uploadId;
}

/** What an admin.import report says, in a few lines. */
export function summary(r) {
  const lines = [];
  const c = r.conversations;
  if (c) {
    lines.push(`${c.added} conversations added, ${c.extended} extended, ${c.unchanged} unchanged, ${c.skipped} skipped;`);
    lines.push(`${r.messages.added} messages added.`);
    if (r.dateRange) lines.push(`From ${r.dateRange.from.slice(0, 10)} to ${r.dateRange.to.slice(0, 10)}.`);
  }
  if (r.sessions) lines.push(`${r.sessions.added} sessions added, ${r.sessions.extended} extended, ${r.sessions.unchanged} unchanged.`);
  if (r.keyed) lines.push(`${r.keyed.added} keyed memories added.`);
  const notes = r.notes || (r.folder ? r : null);
  if (notes) lines.push(`${notes.added} notes added, ${notes.updated} updated, ${notes.conflicts} left as they were here${r.folder ? ` (in ${r.folder}/)` : ""}.`);
  return lines.join("\n");
}

function onProgress(ev) {
  if (!running || ev.detail.method !== "admin.import.progress") return;
  const p = ev.detail.params || {};
  if (p.phase === "indexing") show("Indexing what came in…", null);
  else if (p.bytesTotal) show(`Importing: ${p.conversations} conversations read, ${p.added} added`, p.bytesRead / p.bytesTotal);
  else if (p.files !== undefined) show(`Importing: ${p.files} files read, ${p.added} added`, null);
  else if (p.sessions !== undefined) show(`Importing: ${p.sessions} sessions read, ${p.added} added`, null);
}

rpc.addEventListener("notify", onProgress);

ui.importOpen.addEventListener("click", () => {
  if (!running) show("");
  ui.importDialog.showModal();
});
ui.importClose.addEventListener("click", () => ui.importDialog.close());
ui.importCancel.addEventListener("click", () => ui.importDialog.close());

ui.importForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const file = ui.importFile.files[0];
  if (running || !file) return;
  running = true;
  ui.importStart.disabled = true;
  try {
    const uploadId = await upload(file);
    show("Importing…", 0);
    const report = await rpc.call("admin.import", { source: ui.importSource.value, upload: uploadId }, { timeoutMs: IMPORT_TIMEOUT_MS });
    show(summary(report));
    onImported();
  } catch (err) {
    show(`Not imported: ${errorMessage(err)}`);
  } finally {
    running = false;
    ui.importStart.disabled = false;
  }
});
