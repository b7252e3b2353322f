// JSON-RPC 2.0 over WebSocket for the Jarvis gateway: first-frame auth, calls with timeouts,
// notifications as events, automatic reconnect with exponential backoff (never after a refused token).

export class RpcError extends Error {
  constructor(error) {
    super(error && error.message ? error.message : "request failed");
    this.name = "RpcError";
    this.code = error && typeof error.code === "number" ? error.code : 0;
    this.data = (error && error.data) || {};
  }
}

export const Codes = Object.freeze({
  UNAUTHENTICATED: -32001,
  NOT_FOUND: -32004,
  BUSY: -32009,
  RATE_LIMITED: -32029,
  UPSTREAM: -32050,
  METHOD_NOT_FOUND: -32601,
  DISCONNECTED: -1,
  TIMEOUT: -2,
});

const BACKOFF_START_MS = 500;
const BACKOFF_MAX_MS = 15000;

/**
 * Events (EventTarget):
 *   "state"      detail {state, retryInMs?}   state: idle | connecting | open | waiting | refused | blocked
 *   "open"       detail {reconnected, connectionId}
 *   "refused"    detail {message, code}        the token was refused; no reconnect until connect() again
 *   "blocked"    detail {...probe result}     the socket never opened and `probe` says why (e.g. the
 *                                              gateway refuses this page's Origin); no reconnect until
 *                                              retryNow() or connect()
 *   "notify"     detail {method, params}       every server notification but auth.ok
 */
export class RpcClient extends EventTarget {
  /**
   * @param url      the WebSocket URL
   * @param probe    optional async () => reason|null, asked when a socket closes without ever opening:
   *                 a reason stops the reconnecting (a browser cannot read why a handshake was refused)
   */
  constructor(url, { probe = null } = {}) {
    super();
    this.url = url;
    this.probe = probe;
    this.token = null;
    this.ws = null;
    this.state = "idle";
    this.nextId = 1;
    this.pending = new Map();
    this.attempt = 0;
    this.timer = null;
    this.everOpened = false;
  }

  /** Start (or restart) connecting with this token. */
  connect(token) {
    this.token = token;
    this.attempt = 0;
    this.everOpened = false;
    this._clearTimer();
    this._drop();
    this._open();
  }

  /** Stop for good (sign out). */
  disconnect() {
    this.token = null;
    this._clearTimer();
    this._drop();
    this._setState("idle");
  }

  /** Try now instead of waiting for the backoff timer. */
  retryNow() {
    if (this.state === "waiting" || this.state === "blocked") {
      this._clearTimer();
      this._open();
    }
  }

  get isOpen() {
    return this.state === "open";
  }

  call(method, params, { timeoutMs = 30000 } = {}) {
    if (!this.isOpen || !this.ws) {
      return Promise.reject(new RpcError({ code: Codes.DISCONNECTED, message: "not connected to the gateway" }));
    }
    const id = this.nextId++;
    const frame = { jsonrpc: "2.0", id, method };
    if (params !== undefined) frame.params = params;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new RpcError({ code: Codes.TIMEOUT, message: `${method} timed out` }));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      try {
        this.ws.send(JSON.stringify(frame));
      } catch (err) {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(new RpcError({ code: Codes.DISCONNECTED, message: "not connected to the gateway" }));
      }
    });
  }

  // ---- internals -------------------------------------------------------------------------------

  _setState(state, extra = {}) {
    this.state = state;
    this.dispatchEvent(new CustomEvent("state", { detail: { state, ...extra } }));
  }

  _clearTimer() {
    if (this.timer !== null) {
      clearTimeout(this.timer);
      this.timer = null;
    }
  }

  _drop() {
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close(1000, "client closing");
      } catch (_) {
        /* already closed */
      }
    }
    this._failPending();
  }

  _failPending() {
    for (const { reject, timer } of this.pending.values()) {
      clearTimeout(timer);
      reject(new RpcError({ code: Codes.DISCONNECTED, message: "connection to the gateway was lost" }));
    }
    this.pending.clear();
  }

  _open() {
    if (!this.token) return;
    this._setState("connecting");
    let ws;
    try {
      ws = new WebSocket(this.url);
    } catch (_) {
      this._scheduleReconnect();
      return;
    }
    this.ws = ws;
    let authed = false;
    let opened = false;
    let refusal = null;
    ws.onopen = () => {
      opened = true;
      ws.send(JSON.stringify({ type: "auth", token: this.token }));
    };
    ws.onmessage = (ev) => {
      let msg;
      try {
        msg = JSON.parse(ev.data);
      } catch (_) {
        return;
      }
      if (Array.isArray(msg)) {
        msg.forEach((m) => this._onFrame(m));
        return;
      }
      if (!authed) {
        if (msg && msg.method === "auth.ok") {
          authed = true;
          const reconnected = this.everOpened;
          this.everOpened = true;
          this.attempt = 0;
          this._setState("open");
          this.dispatchEvent(new CustomEvent("open", {
            detail: { reconnected, connectionId: msg.params && msg.params.connectionId },
          }));
        } else if (msg && msg.error) {
          refusal = msg.error;
        }
        return;
      }
      this._onFrame(msg);
    };
    ws.onerror = () => {
      /* a close event always follows */
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this._failPending();
      const refused = !authed && (
        (refusal && (refusal.code === Codes.UNAUTHENTICATED || refusal.code === Codes.RATE_LIMITED)) ||
        (ev.code === 1008 && /token/i.test(ev.reason || ""))
      );
      if (refused) {
        const rateLimited = refusal && refusal.code === Codes.RATE_LIMITED;
        this._setState("refused");
        this.dispatchEvent(new CustomEvent("refused", {
          detail: {
            code: refusal ? refusal.code : Codes.UNAUTHENTICATED,
            message: rateLimited
              ? "Too many failed sign-ins from this address. Wait a minute and try again."
              : "The gateway refused this token. Check it and try again.",
          },
        }));
        return;
      }
      if (!opened && this.probe) {
        const token = this.token;
        const proceed = (reason) => {
          if (this.token !== token || this.ws || this.timer !== null) return; // signed out or retried meanwhile
          if (reason) {
            this._setState("blocked", { reason });
            this.dispatchEvent(new CustomEvent("blocked", { detail: reason }));
          } else {
            this._scheduleReconnect();
          }
        };
        Promise.resolve().then(() => this.probe()).then(proceed, () => proceed(null));
        return;
      }
      this._scheduleReconnect();
    };
  }

  _onFrame(msg) {
    if (!msg || typeof msg !== "object") return;
    if ("id" in msg && msg.id !== null && this.pending.has(msg.id)) {
      const { resolve, reject, timer } = this.pending.get(msg.id);
      this.pending.delete(msg.id);
      clearTimeout(timer);
      if (msg.error) reject(new RpcError(msg.error));
      else resolve(msg.result);
      return;
    }
    if (typeof msg.method === "string" && !("id" in msg)) {
      if (msg.method === "auth.ok") return;
      this.dispatchEvent(new CustomEvent("notify", { detail: { method: msg.method, params: msg.params || {} } }));
    }
  }

  _scheduleReconnect() {
    if (!this.token) return;
    const base = Math.min(BACKOFF_MAX_MS, BACKOFF_START_MS * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + Math.random() * 0.4));
    this.attempt += 1;
    this._setState("waiting", { retryInMs: delay });
    this.timer = setTimeout(() => {
      this.timer = null;
      this._open();
    }, delay);
  }
}

export function gatewayUrl(loc = window.location) {
  return `${loc.protocol === "https:" ? "wss" : "ws"}://${loc.host}/`;
}

/** A random id for idempotency keys; crypto.randomUUID exists only in secure contexts. */
export function randomId() {
  if (window.crypto && typeof window.crypto.randomUUID === "function" && window.isSecureContext) {
    return window.crypto.randomUUID();
  }
  const bytes = new Uint8Array(16);
  window.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
