// What the chat and admin pages share: the API key in session storage, API calls that send it and
// turn failures into words, a small element builder that only ever sets text as text, and Escape
// closing a page's side panel.

const KEY_STORAGE = "citeline.key";

export function storedKey() {
  return sessionStorage.getItem(KEY_STORAGE);
}

export function storeKey(key) {
  sessionStorage.setItem(KEY_STORAGE, key);
}

export function forgetKey() {
  sessionStorage.removeItem(KEY_STORAGE);
}

export function authHeaders() {
  const key = storedKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

/**
 * A failed API call: `status` is the HTTP status (0 when the server could not be reached);
 * `retryAfter`, the seconds the server asked to wait before trying again (a 429 or a 503), if it did.
 */
export class ApiError extends Error {
  name = "ApiError";
  constructor(message, status = 0, code = "", retryAfter = undefined) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
  }
}

const STATUS_WORDS = {
  401: "the API key was refused (unknown or revoked): sign in again",
  403: "this key may not do that (it is not an admin key)",
  404: "not found (or outside this key's scopes)",
  413: "the request is too large",
  429: "too many requests: wait a moment and try again",
  503: "the server is busy or not ready: try again shortly",
};

/** The error of a non-2xx response, with the API's own message when it sent one. */
export async function responseError(response) {
  let message = "";
  let code = "";
  let requestId = response.headers.get("X-Request-ID") ?? "";
  try {
    const body = await response.json();
    message = body?.error?.message ?? "";
    code = body?.error?.code ?? "";
    requestId = body?.error?.request_id ?? requestId;
  } catch {
    // Not the API's error shape (a proxy, a crash): the status says enough.
  }
  const words = message || STATUS_WORDS[response.status] || response.statusText || "request failed";
  const wait = Number.parseInt(response.headers.get("Retry-After") ?? "", 10);
  return new ApiError(
    `${words} (HTTP ${response.status}${requestNote(response.status, requestId)})`,
    response.status,
    code,
    Number.isFinite(wait) ? wait : undefined,
  );
}

/**
 * For a server-side failure (5xx), the request's id, which the server's log lines for it carry: what
 * to quote to whoever runs the server. A refusal (4xx) says what to change; its id would be noise.
 */
export function requestNote(status, requestId) {
  return status >= 500 && requestId ? `, request ${requestId}` : "";
}

let refusedHandler = null;

/**
 * `handler(error)` runs when the API refuses the stored key (HTTP 401: revoked, expired or unknown)
 * mid-session, once the key is forgotten: the page goes back to its sign-in form and says why.
 */
export function onKeyRefused(handler) {
  refusedHandler = handler;
}

/** If `error` is the API refusing the stored key, forget the key and tell the page (once). */
export function checkRefused(error) {
  if (error instanceof ApiError && error.status === 401 && storedKey()) {
    forgetKey();
    refusedHandler?.(error);
  }
}

/**
 * Words for any error, for showing to the user. The network's failures reach here as {@link ApiError}s
 * (see {@link send}); anything else is a fault in the page's own code (a TypeError is one too), said as
 * such and logged to the console, not passed off as a server out of reach.
 */
export function describeError(error) {
  if (error instanceof ApiError) return error.message;
  if (error?.name === "AbortError") return "stopped";
  console.error(error);
  const text = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
  return `an error in this page (${text}); reload the page, and if it happens again, tell whoever runs citeline`;
}

/**
 * `fetch(path, init)`, whose own failure (no server there, no network) rejects with an
 * {@link ApiError} of status 0: fetch says that with a TypeError, as a bug in the page's code would. The
 * request is built first, so a request fetch would refuse (a header it cannot send) is not taken for
 * the network. A Stop stays an abort.
 */
export async function send(path, init) {
  const request = new Request(path, init);
  try {
    return await fetch(request);
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError("the server could not be reached", 0);
  }
}

/**
 * Call the API with the stored key. `json` is sent as a JSON body, `form` as multipart. Resolves to
 * the parsed JSON body (null for an empty one), rejects with an {@link ApiError}.
 */
// Until when the server asked this page to wait (a 429's Retry-After: the key is over its requests a
// minute), and the refusal that asked. The page's requests meanwhile wait too: sent, each would only be
// refused again.
let quietUntil = 0;
let quietBecause = null;

/**
 * The wait the server asked for that is not over yet: its whole seconds left and the refusal that
 * asked it (an {@link ApiError}), or null. A request sent now by {@link api} waits that long first, so a
 * page saying what it is doing says it is waiting rather than leaving "Uploading…" for a minute.
 */
export function quietWait() {
  const left = quietUntil - Date.now();
  return left > 0 ? { seconds: Math.ceil(left / 1000), error: quietBecause } : null;
}

export async function api(path, { method = "GET", json, form, signal } = {}) {
  const quiet = quietUntil - Date.now();
  if (quiet > 0) await new Promise((resolve) => setTimeout(resolve, quiet));
  const headers = authHeaders();
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  const response = await send(path, { method, headers, body, signal });
  if (!response.ok) {
    const error = await responseError(response);
    if (response.status === 429 && error.retryAfter) {
      const until = Date.now() + error.retryAfter * 1000;
      if (until > quietUntil) [quietUntil, quietBecause] = [until, error];
    }
    checkRefused(error);
    throw error;
  }
  let text;
  try {
    text = await response.text();
  } catch (error) {
    if (error?.name === "AbortError") throw error;
    throw new ApiError(`the connection broke before the answer was complete (HTTP ${response.status})`, response.status);
  }
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    // A proxy's or a login portal's page in the API's place: the server's, not the page's, fault.
    throw new ApiError(`the server's answer was not JSON (HTTP ${response.status})`, response.status);
  }
}

/**
 * Escape calls `close` while `panel` is shown: pressed in it, or on the body, where the focus falls when
 * the element holding it is disabled or removed under it (a pager's last page, a list redrawn).
 */
export function closeOnEscape(panel, close) {
  panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
  });
  document.addEventListener("keydown", (event) => {
    const lost = !document.activeElement || document.activeElement === document.body;
    if (event.key === "Escape" && lost && !panel.hidden) close();
  });
}

/**
 * `el("button", {className: "x", type: "button", onclick}, "text", child)`: an element whose string
 * children become text nodes. Properties starting with `on` are listeners, `dataset` is merged, and
 * everything else is set as a property; nothing is ever parsed as HTML.
 */
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props)) {
    if (value === undefined || value === null) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("aria-") || name === "role" || name === "for") node.setAttribute(name, value);
    else node[name] = value;
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Show `message` in the status element `node` (role=status or alert), as text. */
export function say(node, message, kind = "info") {
  node.textContent = message;
  node.dataset.kind = kind;
  node.hidden = !message;
}

/**
 * The sign-in form in `form` (an input named `key`): on submit, the key is checked with
 * `GET /keys/me` and stored; `onSignedIn(me)` gets the key's role and scopes.
 */
export function setUpSignIn(form, status, onSignedIn) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const key = form.elements.key.value.trim();
    const button = form.querySelector('button[type="submit"]');
    if (button.disabled) return; // a key being checked: Enter pressed again sends nothing more
    if (!key) return say(status, "enter an API key", "error");
    // A key goes in a header, which takes no other characters; pasted from a document, a key can carry
    // a typographic one ("…", a non-breaking space) that no key has, and fetch would refuse the request.
    const odd = key.match(/[^\x21-\x7e]/u);
    if (odd) {
      const shown = /\s/u.test(odd[0]) ? "a space" : `"${odd[0]}"`;
      return say(status, `This key holds ${shown}, which no API key has: paste the key as \`citeline keys create\` printed it.`, "error");
    }
    // Said at once: on a slow network the page would otherwise look as if the click did nothing.
    button.disabled = true;
    say(status, "Checking the key…");
    storeKey(key);
    try {
      const me = await api("/keys/me");
      form.reset();
      say(status, "");
      onSignedIn(me);
    } catch (error) {
      forgetKey();
      say(status, `Sign-in failed: ${describeError(error)}`, "error");
    } finally {
      button.disabled = false;
    }
  });
}

/** The stored key's role and scopes, or null when there is no key or it is refused. */
export async function whoAmI() {
  if (!storedKey()) return null;
  try {
    return await api("/keys/me");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) forgetKey();
    return null;
  }
}

export function formatDate(value) {
  if (!value) return "";
  const date = new Date(value);
  return Number.isNaN(date.getTime()) ? String(value) : date.toLocaleString();
}
