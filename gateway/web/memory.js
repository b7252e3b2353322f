// Memory: how a memory location is cited (a transcript by its session's name and date, a file by path
// and lines), the dialog that shows its lines (memory.get), and the side panel with memory search
// (memory.search) and the keyed memories (memory.list / get / set / delete, their versions and trash:
// memory.history / restore / trash / purge) with opening notes by path.

import { Codes, RpcError } from "./rpc.js";
import { narrow, rpc, state, ui } from "./state.js";
import {
  confirmDialog, contentText, errorMessage, formatDate, formatTime, h, sessionName, showUndo, trashRow,
} from "./dom.js";

// ---- citations and the lines dialog ---------------------------------------------------------------

/** A session transcript's key from its memory path (`sessions/<key>.jsonl`), else null. */
function transcriptKey(path) {
  const m = /^sessions\/([A-Za-z0-9._-]{1,128})\.jsonl$/.exec(path || "");
  return m ? m[1] : null;
}

/** How a memory location reads to a person: a transcript as its session's name and date (`date`: when
 * the hit was said, as the gateway dated it; else the session's start), a file as path and lines. Fills
 * `node` now, and again once an unknown session's details arrive. */
export function citationText(path, startLine, endLine, node, date = null) {
  const lines = startLine === endLine ? `line ${startLine}` : `lines ${startLine}–${endLine}`;
  const key = transcriptKey(path);
  if (!key) {
    node.textContent = `${path}:${startLine === endLine ? startLine : `${startLine}–${endLine}`}`;
    return;
  }
  const show = (session) => {
    node.textContent = session
      ? `“${sessionName(session)}” · ${formatDate(date || session.createdAt)} · ${lines}`
      : `a deleted session · ${lines}`;
  };
  const known = state.sessionInfo.get(key);
  if (known) {
    show(known);
    return;
  }
  node.textContent = `a session · ${lines}`;
  rpc.call("sessions.get", { sessionKey: key }).then((session) => {
    state.sessionInfo.set(key, session);
    show(session);
  }, () => show(null));
}

/** The lines dialog: `lines` lines of a memory file or transcript from `startLine` (memory.get). */
export async function openMemory(path, startLine, endLine, title = null) {
  const lines = Math.max(1, Math.min(1000, (endLine || startLine) - startLine + 1));
  ui.memoryTitle.textContent = title || path;
  ui.memoryMeta.textContent = `Lines ${startLine}–${endLine}… loading`;
  ui.memoryText.textContent = "";
  if (!ui.memoryDialog.open) ui.memoryDialog.showModal();
  try {
    const res = await rpc.call("memory.get", { path, from: startLine, lines });
    const shown = res.text.replace(/\n$/, "").split("\n").length;
    ui.memoryMeta.textContent = `Lines ${res.from}–${res.from + Math.max(0, shown - 1)}` +
      (res.truncated ? " (the file continues)" : "");
    ui.memoryText.textContent = path.endsWith(".jsonl") ? transcriptText(res.text) : res.text;
  } catch (err) {
    ui.memoryMeta.textContent = `Could not load it: ${errorMessage(err)}`;
  }
  ui.memoryText.focus();
}

function transcriptText(text) {
  // Transcript chunks are JSONL; show them as "role: content" and keep anything unreadable as is.
  return text.split("\n").filter((l) => l.trim()).map((line) => {
    try {
      const rec = JSON.parse(line);
      if (rec.type === "message" && rec.message) {
        return `${rec.message.role}: ${contentText(rec.message.content)}`;
      }
      if (rec.type === "session") return `(session started ${rec.createdAt || ""})`;
      return line;
    } catch (_) {
      return line;
    }
  }).join("\n\n");
}

ui.memoryClose.addEventListener("click", () => ui.memoryDialog.close());
ui.memoryDialog.addEventListener("click", (ev) => {
  if (ev.target === ui.memoryDialog) ui.memoryDialog.close(); // backdrop click
});

// ---- memory search -------------------------------------------------------------------------------

const PANEL_TITLES = { search: "Search memory", memories: "Memories" };

/** The side panel shows memory search or the keyed memories; null closes it. */
function setPanel(mode) {
  const before = state.panel;
  state.panel = mode;
  ui.searchPanel.hidden = !mode;
  ui.searchSection.hidden = mode !== "search";
  ui.memoriesSection.hidden = mode !== "memories";
  ui.searchToggle.setAttribute("aria-expanded", String(mode === "search"));
  ui.memoriesToggle.setAttribute("aria-expanded", String(mode === "memories"));
  ui.app.classList.toggle("with-search", Boolean(mode));
  if (mode) {
    ui.searchTitle.textContent = PANEL_TITLES[mode];
    ui.searchClose.setAttribute("aria-label", mode === "search" ? "Close memory search" : "Close memories");
  }
  if (mode === "search") ui.searchInput.focus();
  else if (mode === "memories") {
    loadNotes();
    loadMemories();
    ui.memoryAdd.focus();
  } else if (before) (before === "memories" ? ui.memoriesToggle : ui.searchToggle).focus();
}

function setSearchOpen(open) {
  setPanel(open ? "search" : null);
}

ui.searchToggle.addEventListener("click", () => setPanel(state.panel === "search" ? null : "search"));
ui.memoriesToggle.addEventListener("click", () => setPanel(state.panel === "memories" ? null : "memories"));
ui.searchClose.addEventListener("click", () => setPanel(null));
ui.searchPanel.addEventListener("keydown", (ev) => {
  if (ev.key === "Escape") setPanel(null);
});

ui.searchForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const query = ui.searchInput.value.trim();
  if (!query) {
    ui.searchStatus.textContent = "Type something to search for.";
    return;
  }
  const params = { query, k: 10 };
  if (ui.searchSource.value !== "all") params.sources = [ui.searchSource.value];
  ui.searchStatus.textContent = "Searching…";
  ui.searchResults.replaceChildren();
  try {
    const res = await rpc.call("memory.search", params);
    renderResults(res);
  } catch (err) {
    ui.searchStatus.textContent = err instanceof RpcError && err.code === Codes.METHOD_NOT_FOUND
      ? "Memory is not enabled on this gateway."
      : `Search failed: ${errorMessage(err)}`;
  }
});

function renderResults(res) {
  const n = res.results.length;
  ui.searchStatus.textContent = n
    ? `${n} result${n === 1 ? "" : "s"}${res.degraded ? ` (${res.mode}: ${res.degraded})` : ""}`
    : "No results.";
  for (const r of res.results) {
    const label = h("span", { class: "path", title: `${r.path}:${r.startLine}-${r.endLine}` });
    citationText(r.path, r.startLine, r.endLine, label, r.date);
    const actions = h("div", { class: "result-actions" },
      h("button", { type: "button", class: "link-button", text: "Show lines", onclick: () => openMemory(r.path, r.startLine, r.endLine, label.textContent) }),
      r.sessionKey
        ? h("a", {
          href: `#s=${encodeURIComponent(r.sessionKey)}`, class: "link-button", text: "Open session",
          onclick: () => { if (narrow.matches) setSearchOpen(false); },
        })
        : null);
    ui.searchResults.appendChild(h("li", { class: "result" },
      h("div", { class: "result-head" },
        label,
        r.date && !r.sessionKey ? h("span", { class: "hint", text: formatDate(r.date) }) : null,
        h("span", { class: "badge", text: r.source }),
        h("span", { class: "score", title: "score", text: Number(r.score).toFixed(2) })),
      // The snippet as the gateway shaped it (gateway/memory/present.py: a keyed memory's value).
      h("p", { class: "snippet", text: r.snippet }),
      actions));
  }
}

// ---- keyed memories (memory.list / get / set / delete) and notes ---------------------------------

const CATEGORIES = ["general", "preferences", "facts", "people", "projects", "decisions", "tasks"];
for (const c of CATEGORIES) ui.memoryCategory.appendChild(h("option", { value: c, text: c }));

function memoryFailure(err) {
  return err instanceof RpcError && err.code === Codes.METHOD_NOT_FOUND
    ? "Memory is not enabled on this gateway."
    : errorMessage(err);
}

async function loadMemories(status = "") {
  ui.memoriesStatus.textContent = status || "Loading…";
  try {
    const res = await rpc.call("memory.list", { limit: 500 });
    renderMemories(res, status);
  } catch (err) {
    ui.memoriesList.replaceChildren();
    ui.memoriesStatus.textContent = `Could not load memories: ${memoryFailure(err)}`;
  }
  loadBeliefs();
}

// ---- what Jarvis believes about you (memory.profile; corrections are keyed memories profile.<subject>) --

/** The keyed memory that corrects a subject ("code:shed" → "profile.code_shed"). */
function correctionKey(subject) {
  return "profile." + subject.replace(/:/g, "_");
}

async function loadBeliefs(status = "") {
  try {
    const page = await rpc.call("memory.profile", {});
    renderBeliefs(page.facts, status);
    moreBeliefs(page.nextCursor);
  } catch (err) {
    ui.beliefsList.replaceChildren();
    ui.beliefsStatus.textContent = `Could not load what Jarvis believes: ${memoryFailure(err)}`;
  }
}

function renderBeliefs(facts, status) {
  ui.beliefsStatus.textContent = (status ? status + " " : "") + (facts.length
    ? "Gathered from your conversations and notes. Correct or forget any of them."
    : "Nothing yet: what you tell Jarvis about your life (home, work, people, pets, codes…) shows up here.");
  ui.beliefsList.replaceChildren();
  facts.forEach(appendBelief);
}

/** memory.profile answers a page at a time: "Show more" asks for the next one, where there is one. */
function moreBeliefs(cursor) {
  if (!cursor) return;
  const item = h("li", { class: "memory-item beliefs-more" },
    h("button", {
      type: "button", class: "link-button", text: "Show more", "aria-label": "Show more of what Jarvis believes",
      onclick: async () => {
        try {
          const page = await rpc.call("memory.profile", { cursor });
          item.remove();
          page.facts.forEach(appendBelief);
          moreBeliefs(page.nextCursor);
        } catch (err) {
          ui.beliefsStatus.textContent = `Could not load more: ${memoryFailure(err)}`;
        }
      },
    }));
  ui.beliefsList.appendChild(item);
}

/** One fact of the panel: its value, since when, what it was before, and where it was said. */
function appendBelief(f) {
  const earlier = f.history.slice().reverse().map((p) =>
    h("li", { text: `${p.value || "(ended)"} · ${formatDate(p.from)} – ${p.until ? formatDate(p.until) : ""}` }));
  ui.beliefsList.appendChild(h("li", { class: "memory-item belief", "data-subject": f.subject },
    h("span", { class: "memory-item-head" },
      h("span", { class: "memory-key", text: f.subject }),
      h("span", { class: "badge", text: f.source === "correction" ? "your correction" : `since ${formatDate(f.since)}` })),
    h("span", { class: "memory-preview", text: f.value }),
    earlier.length ? h("details", { class: "memory-history" },
      h("summary", { text: "Before" }), h("ul", { class: "trash-list" }, ...earlier)) : null,
    h("span", { class: "trash-actions" },
      h("button", {
        type: "button", class: "link-button", text: "Where I said it", "aria-label": `Where ${f.subject} was said`,
        onclick: () => openMemory(f.evidence.path, f.evidence.startLine, f.evidence.endLine),
      }),
      h("button", {
        type: "button", class: "link-button", text: "Correct", "aria-label": `Correct ${f.subject}`,
        onclick: () => correctBelief(f),
      }),
      h("button", {
        type: "button", class: "link-button", text: "Forget", "aria-label": `Forget ${f.subject}`,
        onclick: () => forgetBelief(f),
      }))));
}

/** A correction is a keyed memory of its own: the form, filled in, saves it (versioned, undoable). */
function correctBelief(f) {
  showMemoryForm(null);
  ui.memoryKey.value = correctionKey(f.subject);
  ui.memoryCategory.value = "facts";
  ui.memoryValue.value = f.value;
  ui.memoryFormMeta.textContent = `Your correction of ${f.subject}: it holds from now on, until you say otherwise.`;
  ui.memoryValue.focus();
}

async function forgetBelief(f) {
  const key = correctionKey(f.subject);
  try {
    await rpc.call("memory.set", { key, value: "-", category: "facts" });
    await loadMemories();
    // Undo: the correction it replaced again (a new version), or no correction at all (to the trash).
    showUndo(`Forgot ${f.subject}.`, async () => {
      if (f.source === "correction") await rpc.call("memory.set", { key, value: f.value, category: "facts" });
      else await rpc.call("memory.delete", { key });
      await loadMemories();
    });
  } catch (err) {
    ui.beliefsStatus.textContent = `Not forgotten: ${memoryFailure(err)}`;
  }
}

function renderMemories(res, status) {
  const n = res.memories.length;
  ui.memoriesStatus.textContent = (status ? status + " " : "") +
    (n ? `${res.total} keyed memor${res.total === 1 ? "y" : "ies"}.` : "No keyed memories yet. Add one, or ask Jarvis to remember something.");
  ui.memoriesList.replaceChildren();
  for (const m of res.memories) {
    ui.memoriesList.appendChild(h("li", { class: "memory-item", "data-key": m.key },
      h("button", {
        type: "button", class: "memory-open", "aria-label": `Edit memory ${m.key}`,
        onclick: () => editMemory(m.key),
      },
      h("span", { class: "memory-item-head" },
        h("span", { class: "memory-key", text: m.key }),
        h("span", { class: "badge", text: m.category }),
        h("span", { class: "hint", text: formatDate(m.updated) })),
      h("span", { class: "memory-preview", text: m.preview })),
      h("button", {
        type: "button", class: "link-button", text: "Open file", "aria-label": `Open the file of ${m.key}`,
        onclick: () => openMemory(m.path, 1, 200),
      })));
  }
}

function showMemoryForm(entry) {
  ui.memoryForm.hidden = false;
  ui.memoryForm.dataset.mode = entry ? "edit" : "add";
  ui.memoryKey.value = entry ? entry.key : "";
  ui.memoryKey.readOnly = Boolean(entry);
  ui.memoryCategory.value = entry ? entry.category : "general";
  ui.memoryValue.value = entry ? entry.value : "";
  ui.memoryDelete.hidden = !entry;
  ui.memoryHistory.hidden = true;
  ui.memoryFormMeta.textContent = entry
    ? `${entry.path} · updated ${formatTime(entry.updated)}`
    : "Saved as memory/keyed/<category>/<key>.md in the workspace; searchable at once.";
  (entry ? ui.memoryValue : ui.memoryKey).focus();
}

async function editMemory(key) {
  try {
    showMemoryForm(await rpc.call("memory.get", { key }));
  } catch (err) {
    ui.memoriesStatus.textContent = `Could not open ${key}: ${memoryFailure(err)}`;
    return;
  }
  loadMemoryHistory(key);
}

/** The entry's earlier versions (memory.history), each with Restore (memory.restore: a new version). */
async function loadMemoryHistory(key) {
  ui.memoryHistory.hidden = true;
  ui.memoryHistoryList.replaceChildren();
  let res;
  try {
    res = await rpc.call("memory.history", { key });
  } catch (_) {
    return; // the form works without it
  }
  const earlier = res.versions.filter((v) => !v.current);
  if (!earlier.length || ui.memoryKey.value !== key) return;
  for (const v of earlier) {
    ui.memoryHistoryList.appendChild(h("li", { class: "trash-item", "data-version": String(v.version) },
      h("span", { class: "trash-name", text: v.value }),
      h("span", { class: "hint", text: `v${v.version} · ${formatTime(v.at)}${author(v)}` }),
      h("span", { class: "trash-actions" },
        h("button", {
          type: "button", class: "link-button", text: "Restore", "aria-label": `Restore version ${v.version}`,
          onclick: async () => {
            try {
              const back = await rpc.call("memory.restore", { key, version: v.version });
              await loadMemories(`Restored version ${v.version} of ${key}.`);
              showMemoryForm(back);
              loadMemoryHistory(key);
            } catch (err) {
              ui.memoryFormMeta.textContent = `Not restored: ${memoryFailure(err)}`;
            }
          },
        }))));
  }
  ui.memoryHistory.hidden = false;
}

ui.memoryAdd.addEventListener("click", () => showMemoryForm(null));
ui.memoryCancel.addEventListener("click", () => {
  ui.memoryForm.hidden = true;
  ui.memoryAdd.focus();
});

ui.memoryForm.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const key = ui.memoryKey.value.trim();
  const value = ui.memoryValue.value;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(key)) {
    ui.memoryFormMeta.textContent = "A key is letters, digits, '.', '_' and '-', starting with a letter or digit.";
    ui.memoryKey.focus();
    return;
  }
  if (!value.trim()) {
    ui.memoryFormMeta.textContent = "Write what to remember.";
    ui.memoryValue.focus();
    return;
  }
  try {
    const res = await rpc.call("memory.set", { key, value, category: ui.memoryCategory.value });
    ui.memoryForm.hidden = true;
    await loadMemories(`${res.replaced ? "Updated" : "Saved"} ${res.key}.`);
  } catch (err) {
    ui.memoryFormMeta.textContent = `Not saved: ${memoryFailure(err)}`;
  }
});

ui.memoryDelete.addEventListener("click", async () => {
  const key = ui.memoryKey.value;
  const ok = await confirmDialog(`The memory “${key}” will move to the trash and leave search; you can restore it from there.`,
    "Delete memory?");
  if (!ok) return;
  try {
    await rpc.call("memory.delete", { key });
    ui.memoryForm.hidden = true;
    await loadMemories(`Deleted ${key}.`);
    showUndo(`Deleted ${key}.`, () => restoreMemory(key));
    if (ui.memoryTrash.open) loadMemoryTrash();
  } catch (err) {
    ui.memoryFormMeta.textContent = `Not deleted: ${memoryFailure(err)}`;
  }
});

/** memory.restore {key}: back from the trash, whole and searchable. */
async function restoreMemory(key) {
  await rpc.call("memory.restore", { key });
  await loadMemories(`Restored ${key}.`);
  if (ui.memoryTrash.open) loadMemoryTrash();
}

async function loadMemoryTrash() {
  ui.memoryTrashStatus.textContent = "Loading…";
  try {
    const res = await rpc.call("memory.trash", { limit: 500 });
    ui.memoryTrashList.replaceChildren();
    for (const m of res.memories) {
      const name = h("span", {}, h("span", { class: "memory-key", text: m.key }), ` ${m.preview}`);
      ui.memoryTrashList.appendChild(trashRow(m.key, name, `${m.category} · deleted ${formatTime(m.deletedAt)}`,
        `memory ${m.key}`,
        () => restoreMemory(m.key).catch((err) => {
          ui.memoryTrashStatus.textContent = `Not restored: ${memoryFailure(err)}`;
        }),
        () => purgeMemory(m.key)));
    }
    ui.memoryTrashStatus.textContent = res.total
      ? `${res.total} deleted memor${res.total === 1 ? "y" : "ies"}.`
      : "The trash is empty.";
  } catch (err) {
    ui.memoryTrashStatus.textContent = `Could not load the trash: ${memoryFailure(err)}`;
  }
}

async function purgeMemory(key) {
  const ok = await confirmDialog(`The memory “${key}” will be gone for good; it cannot be restored.`, "Delete forever?");
  if (!ok) return;
  try {
    await rpc.call("memory.purge", { key });
  } catch (err) {
    ui.memoryTrashStatus.textContent = `Not deleted: ${memoryFailure(err)}`;
    return;
  }
  loadMemoryTrash();
}

ui.memoryTrash.addEventListener("toggle", () => {
  if (ui.memoryTrash.open) loadMemoryTrash();
});

// ---- notes: the workspace's files (memory.files), opened and saved in an editor (memory.write) -------

function formatSize(bytes) {
  return bytes < 1024 ? `${bytes} B` : `${(bytes / 1024).toFixed(bytes < 10240 ? 1 : 0)} KB`;
}

async function loadNotes() {
  ui.notesStatus.textContent = "Loading…";
  try {
    const { files } = await rpc.call("memory.files", {});
    const notes = files.filter((f) => !f.path.startsWith("memory/keyed/") && !f.path.startsWith("memory/images/"));
    ui.notesList.replaceChildren(...notes.map((f) => h("li", { class: "note-item", "data-path": f.path },
      h("button", {
        type: "button", class: "note-open", "aria-label": `${f.writable ? "Edit" : "Read"} note ${f.path}`,
        onclick: () => (f.writable ? editNote(f.path) : openMemory(f.path, 1, 1000)),
      },
      h("span", { class: "note-path", text: f.path }),
      h("span", { class: "hint", text: `${formatSize(f.size)} · ${formatDate(f.modified)}${f.writable ? "" : " · read only"}` })))));
    ui.notesStatus.textContent = notes.length ? "" : "No notes yet. Name one below to start it.";
  } catch (err) {
    ui.notesList.replaceChildren();
    ui.notesStatus.textContent = `Could not list notes: ${memoryFailure(err)}`;
  }
}

let editing = null; // the note open in the editor: {path, original}

/** Open a note in the editor (memory.get, all of it); a path that does not exist yet starts a new note. */
async function editNote(path) {
  editing = { path, original: "" };
  ui.noteTitle.textContent = path;
  ui.noteText.value = "";
  ui.noteText.readOnly = true;
  ui.noteSave.disabled = true;
  ui.noteMeta.textContent = "Loading…";
  if (!ui.noteDialog.open) ui.noteDialog.showModal();
  try {
    const res = await rpc.call("memory.get", { path, from: 1, lines: 10000 });
    if (res.truncated) {
      ui.noteText.value = res.text;
      ui.noteMeta.textContent = "Too long to edit here (only its start is shown); edit the file itself.";
      return;
    }
    editing.original = res.text;
    ui.noteText.value = res.text;
    ui.noteMeta.textContent = "Saved in the workspace and searchable as soon as you save.";
  } catch (err) {
    if (!(err instanceof RpcError && err.code === Codes.NOT_FOUND)) {
      ui.noteMeta.textContent = `Could not open it: ${memoryFailure(err)}`;
      return;
    }
    ui.noteMeta.textContent = "A new note: it is created when you save.";
  }
  ui.noteText.readOnly = false;
  ui.noteSave.disabled = false;
  ui.noteText.focus();
}

ui.noteEditor.addEventListener("submit", async (ev) => {
  ev.preventDefault();
  if (!editing) return;
  ui.noteSave.disabled = true;
  ui.noteMeta.textContent = "Saving…";
  try {
    const text = ui.noteText.value;
    const res = await rpc.call("memory.write", { path: editing.path, content: text.endsWith("\n") || !text ? text : text + "\n" });
    editing.original = ui.noteText.value;
    ui.noteMeta.textContent = `${res.created ? "Created" : "Saved"} ${res.path} (${formatSize(res.size)}).`;
    loadNotes();
  } catch (err) {
    ui.noteMeta.textContent = `Not saved: ${memoryFailure(err)}`;
  } finally {
    ui.noteSave.disabled = false;
  }
});

async function closeNote() {
  if (editing && !ui.noteText.readOnly && ui.noteText.value !== editing.original) {
    const ok = await confirmDialog("Your changes to this note are not saved.", "Discard changes?");
    if (!ok) return;
  }
  editing = null;
  ui.noteDialog.close();
}

ui.noteCancel.addEventListener("click", closeNote);
ui.noteClose.addEventListener("click", closeNote);
ui.noteDialog.addEventListener("cancel", (ev) => {
  ev.preventDefault(); // Escape asks first too
  closeNote();
});

ui.noteForm.addEventListener("submit", (ev) => {
  ev.preventDefault();
  const path = ui.notePath.value.trim();
  if (path) editNote(path);
});

/** Who wrote a version (its principal) and how (its door): " · by owner via websocket". */
function author(v) {
  if (v.principal && v.by) return ` · by ${v.principal} via ${v.by}`;
  if (v.principal) return ` · by ${v.principal}`;
  return v.by ? ` · via ${v.by}` : "";
}
