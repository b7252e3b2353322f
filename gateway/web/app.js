// The Jarvis web chat's entry point: imports the page's modules, each of which wires its own part of the
// page, and joins them where one concern's event starts another's work. The modules:
//   state.js     the one connection (rpc), the shared state, the page's elements by id (ui), and what the
//                key may call (may(), loadAbilities: controls marked data-needs are offered only then)
//   dom.js       small shared helpers: h() to build DOM nodes, dates, names, errors, the confirm dialog
//   signin.js    the token, sign in / out, connection status, a refused origin
//   health.js    the model badge and the offline banner
//   sessions.js  the sidebar: list, search, date groups, new / rename / delete, opening a session
//   chat.js      the messages, composer, streaming replies, Stop, Copy / Regenerate, recalled memories
//   memory.js    citations and the lines dialog, memory search, notes (list and editor), keyed memories
//   settings.js  the open session's model picker (chat.models) and system prompt (sessions.update)
//   importing.js the import dialog: a file sent in pieces (admin.upload), then admin.import
//   devices.js   "Devices and apps": principals listed, made (the token shown once) and revoked
// None of them imports app.js; sessions.js imports chat.js, chat.js imports memory.js and settings.js,
// never back.
// All user and model text reaches the page through textContent / DOM building (see render.js).

import { onReplyFinal } from "./chat.js";
import { loadDevices } from "./devices.js";
import { loadHealth } from "./health.js";
import { whenImported } from "./importing.js";
import "./memory.js";
import { loadSessions, resumeSessions } from "./sessions.js";
import { loadModels } from "./settings.js";
import { signedIn, start } from "./signin.js";
import { loadAbilities, rpc } from "./state.js";

rpc.addEventListener("open", async (ev) => {
  await loadAbilities(); // what the key may do, before anything offers it
  signedIn();
  loadHealth();
  loadModels().then(loadHealth); // chat.models looks again for a local model server: the badge follows
  loadDevices();
  await resumeSessions({ reconnected: ev.detail.reconnected });
});

// After each reply: the sessions list, and the badge (a model server found on this machine may have gone
// away, the offline responder answering with the reason, or come back).
onReplyFinal(() => {
  loadSessions();
  loadHealth();
});
whenImported(loadSessions);

start();
