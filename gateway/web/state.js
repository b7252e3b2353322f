// The page's shared state: the one gateway connection, what the modules share about sessions, runs and
// the side panel, and the page's elements looked up once by id. Every other module imports from here;
// this module imports nothing of the page's own but rpc.js.

import { RpcClient, gatewayUrl } from "./rpc.js";

const $ = (id) => document.getElementById(id);

export const ui = {
  signin: $("signin"),
  signinForm: $("signin-form"),
  tokenInput: $("token-input"),
  rememberInput: $("remember-input"),
  signinError: $("signin-error"),
  signinButton: $("signin-button"),
  app: $("app"),
  connStatus: $("conn-status"),
  connText: $("conn-text"),
  reconnectNow: $("reconnect-now"),
  signOut: $("sign-out"),
  sessionsToggle: $("sessions-toggle"),
  sidebar: $("sidebar"),
  newSession: $("new-session"),
  sessionList: $("session-list"),
  sessionsError: $("sessions-error"),
  sessionTitle: $("session-title"),
  modelPicker: $("model-picker"),
  promptButton: $("prompt-button"),
  promptDialog: $("prompt-dialog"),
  promptForm: $("prompt-form"),
  promptText: $("prompt-text"),
  promptMeta: $("prompt-meta"),
  promptReset: $("prompt-reset"),
  promptCancel: $("prompt-cancel"),
  messages: $("messages"),
  emptyState: $("empty-state"),
  composer: $("composer"),
  input: $("message-input"),
  send: $("send-button"),
  stop: $("stop-button"),
  searchToggle: $("search-toggle"),
  memoriesToggle: $("memories-toggle"),
  modelBadge: $("model-badge"),
  originBanner: $("origin-banner"),
  originText: $("origin-text"),
  offlineBanner: $("offline-banner"),
  offlineDismiss: $("offline-dismiss"),
  offlineDetails: $("offline-details"),
  offlineTitle: $("offline-title"),
  offlineReason: $("offline-reason"),
  foundBanner: $("found-banner"),
  foundText: $("found-text"),
  foundDismiss: $("found-dismiss"),
  sessionFilter: $("session-filter"),
  searchTitle: $("search-title"),
  searchSection: $("search-section"),
  memoriesSection: $("memories-section"),
  memoryAdd: $("memory-add"),
  notesStatus: $("notes-status"),
  notesList: $("notes-list"),
  noteDialog: $("note-dialog"),
  noteEditor: $("note-editor"),
  noteTitle: $("note-title"),
  noteText: $("note-text"),
  noteMeta: $("note-meta"),
  noteSave: $("note-save"),
  noteCancel: $("note-cancel"),
  noteClose: $("note-close"),
  noteForm: $("note-form"),
  notePath: $("note-path"),
  memoryForm: $("memory-form"),
  memoryKey: $("memory-key"),
  memoryCategory: $("memory-category"),
  memoryValue: $("memory-value"),
  memoryFormMeta: $("memory-form-meta"),
  memoryDelete: $("memory-delete"),
  memoryCancel: $("memory-cancel"),
  memoriesStatus: $("memories-status"),
  memoriesList: $("memories-list"),
  beliefsStatus: $("beliefs-status"),
  beliefsList: $("beliefs-list"),
  confirmTitle: $("confirm-title"),
  undoToast: $("undo-toast"),
  undoText: $("undo-text"),
  undoButton: $("undo-button"),
  sessionTrash: $("session-trash"),
  sessionTrashStatus: $("session-trash-status"),
  sessionTrashList: $("session-trash-list"),
  memoryTrash: $("memory-trash"),
  memoryTrashStatus: $("memory-trash-status"),
  memoryTrashList: $("memory-trash-list"),
  memoryHistory: $("memory-history"),
  memoryHistoryList: $("memory-history-list"),
  searchPanel: $("search-panel"),
  searchClose: $("search-close"),
  searchForm: $("search-form"),
  searchInput: $("search-input"),
  searchSource: $("search-source"),
  searchStatus: $("search-status"),
  searchResults: $("search-results"),
  memoryDialog: $("memory-dialog"),
  memoryTitle: $("memory-title"),
  memoryMeta: $("memory-meta"),
  memoryText: $("memory-text"),
  memoryClose: $("memory-close"),
  importOpen: $("import-open"),
  importDialog: $("import-dialog"),
  importForm: $("import-form"),
  importClose: $("import-close"),
  importSource: $("import-source"),
  importFile: $("import-file"),
  importProgress: $("import-progress"),
  importStatus: $("import-status"),
  importCancel: $("import-cancel"),
  importStart: $("import-start"),
  devicesOpen: $("devices-open"),
  devicesDialog: $("devices-dialog"),
  devicesClose: $("devices-close"),
  devicesList: $("devices-list"),
  devicesForm: $("devices-form"),
  devicesName: $("devices-name"),
  devicesAgents: $("devices-agents"),
  devicesNewAgent: $("devices-new-agent"),
  devicesProxy: $("devices-proxy"),
  devicesExpires: $("devices-expires"),
  devicesToken: $("devices-token"),
  devicesTokenValue: $("devices-token-value"),
  devicesStatus: $("devices-status"),
  confirmDialog: $("confirm-dialog"),
  confirmText: $("confirm-text"),
  confirmOk: $("confirm-ok"),
  confirmCancel: $("confirm-cancel"),
};

/** Narrow screens (phones): the sessions drawer, a full-screen panel, folded banners. */
export const narrow = window.matchMedia("(max-width: 760px)");

/** Asked when the socket closed before it opened: does the gateway refuse this page's Origin? */
async function probeOrigin() {
  const res = await fetch(`/healthz?origin=${encodeURIComponent(location.origin)}`, { cache: "no-store" });
  if (!res.ok) return null;
  const body = await res.json();
  return body && body.origin && body.origin.allowed === false ? body.origin : null;
}

export const rpc = new RpcClient(gatewayUrl(), { probe: probeOrigin });

// What this connection's key may call (system.methods lists only those): the page offers nothing else.
let allowed = null; // null: not known yet (or an older gateway): everything is offered

/** Whether the signed-in key may call `method`. */
export function may(method) {
  return allowed === null || allowed.has(method);
}

/** Ask which methods the key may call, then hide every control marked `data-needs="method"` that it may
 * not (class not-allowed; the modules' own `hidden` stays theirs). Called on each open. */
export async function loadAbilities() {
  try {
    const res = await rpc.call("system.methods");
    allowed = new Set(res.methods.map((m) => m.name));
  } catch (_) {
    allowed = null;
  }
  for (const el of document.querySelectorAll("[data-needs]")) {
    el.classList.toggle("not-allowed", !el.dataset.needs.split(" ").every(may));
  }
}

export const state = {
  sessions: [],
  current: null, // sessionKey
  subscribed: null, // sessionKey we are subscribed to on this connection
  runs: new Map(), // runId → RunView (current session only)
  activeRunId: null,
  pendingSend: false,
  regenerating: null, // the reply view a chat.regenerate in flight streams into
  openSeq: 0, // guards against out-of-order session loads
  opening: null, // the open session's load (its history read) while in flight: a message waits for it
  sendWaits: false, // a message typed while the open session loads waits for it (chat.js)
  sessionInfo: new Map(), // sessionKey → session (also ones not in the loaded list), for citations
  panel: null, // null | "search" | "memories"
};
