// The admin page: statistics, the document table (live while documents are being ingested, including
// builds started elsewhere), upload and web pages by URL, actions on documents, a document's detail
// with its chunks and its labels to change, and API keys. A reader key sees the statistics and the
// documents of its scopes, and no action.

import {
  api,
  closeOnEscape,
  describeError,
  el,
  forgetKey,
  formatDate,
  onKeyRefused,
  quietWait,
  say,
  setUpSignIn,
  whoAmI,
} from "./common.js";

const $ = (id) => document.getElementById(id);
const POLL_MS = 1000;
// How often a visible page looks for builds started elsewhere (another admin's page, the CLI, the API).
const WATCH_MS = 5000;
const BUILDING = new Set(["queued", "processing"]);
// How recent a failure GET /builds is asked for while the page follows a build: a followed build that
// ended failed is said with its reason. A page hidden for longer only learns it from the list.
const FAILED_WITHIN = "1h";
const CHUNKS_PER_PAGE = 50;
// While files are uploaded, the list is read at most this often: read after each file, it spent the
// key's requests a minute (CITELINE_API_RATE_LIMIT) twice as fast as the uploads themselves.
const UPLOAD_LIST_MS = 2000;
// How many times one file's upload waits out the rate limit before it is said not uploaded.
const RATE_LIMIT_WAITS = 5;
// Uploaded documents the list does not show (filtered out, past its first 200) read one by one once
// their build ended: at most this many at each refresh, to stay well within the rate limit.
const FOLLOW_READS = 3;

const state = {
  me: null,
  pollTimer: null,
  watchTimer: null,
  watchRun: 0, // the watch running now: one started anew (shown again, signed in) ends the one before
  // The builds in progress as last read (their versions and statuses; null: not read yet).
  seenBuilds: null,
  listed: [], // the documents the table shows
  // What the list showed (see listedAs) when it was last read, and when the statistics were last
  // asked for: the statistics are read again when the two differ (see loadDocuments).
  listedAs: null,
  statsFor: null,
  listing: 0, // the newest listing asked for: an older one answering later is not shown over it
  acting: new Set(), // ids of documents with an action on its way: their buttons wait for its answer
  adding: false, // an upload or a web page on its way: a second click would add the files again
  addFocus: null, // the add button that had the focus when it was disabled, to give it back
  detailId: null,
  keyNames: new Map(), // key id -> its name (or prefix), from the last list of keys: who uploaded what
  labelled: null, // the document whose labels the relabel form was filled from
  chunkOffset: 0,
  chunkTotal: 0,
  chunkRequest: 0, // the newest page of chunks asked for
  // Re-ingests followed: document id -> the version being built, started here or elsewhere. The list
  // shows each document's current version, which stays "completed" while its next one is built.
  building: new Map(),
  cancelled: new Set(), // ids whose build was cancelled here, so its end is not reported as a failure
  late: new Map(), // id -> times a followed build was seen ended before the list showed its version
  // The last files or web page added here, followed until each is ingested or failed (see followAdded).
  added: null,
  // Versions of the documents said to hold an uploaded file's bytes that the list did not show:
  // document id -> promise of its version (null when it could not be read), read once an upload.
  sameVersions: new Map(),
};

const isAdmin = () => state.me?.role === "admin";

/** A wait the server asked for (a 429's Retry-After), in words: "waiting 4 s, as the server asks: why". */
const waitWords = (seconds, error) => `waiting ${seconds} s, as the server asks: ${describeError(error)}`;

function fail(prefix, error) {
  say($("admin-status"), `${prefix}: ${describeError(error)}`, "error");
}

/** What `prefix` failed at works again: its failure (or the wait the server asked for it), if still
 * shown, is no longer true. The page asks every few seconds, so a moment without the server would
 * otherwise be reported for good. */
function recovered(prefix) {
  const status = $("admin-status");
  if (status.textContent.startsWith(`${prefix}: `)) say(status, "");
}

// -- labels ---------------------------------------------------------------------------------------

/** Labels the page refuses before sending them, with the field to go back to. */
class LabelError extends Error {
  name = "LabelError";
  constructor(message, field) {
    super(message);
    this.field = field;
  }
}

/**
 * The names in a comma-separated field, as the API stores them: trimmed, each once, blank entries
 * ("a, , b") left out. A field holding text but no name (", ,") is refused rather than read as no
 * name: `empty` says what an empty field means (for scopes, a universal document every search sees).
 */
function names(field, what, empty) {
  const text = field.value;
  const kept = [...new Set(text.split(",").map((part) => part.trim()).filter(Boolean))];
  const label = `${what[0].toUpperCase()}${what.slice(1)}s`;
  if (text.trim() && !kept.length) {
    throw new LabelError(`${label}: "${text.trim()}" names no ${what}; ${empty}.`, field);
  }
  if (text.includes("\0")) throw new LabelError(`${label}: a ${what} must not contain a NUL character.`, field);
  return kept;
}

/** The category field: a slash-separated path, or undefined when empty; only slashes is refused. */
function categoryOf(field) {
  const text = field.value.trim();
  if (!text) return undefined;
  if (!text.split("/").some((part) => part.trim())) {
    throw new LabelError(
      `Category: "${text}" names no category; give a path such as plant/valves, or leave it empty.`, field);
  }
  if (text.includes("\0")) throw new LabelError("Category: it must not contain a NUL character.", field);
  return text;
}

/** A document's labels in words, as the server stored them: what an upload or a relabel did. */
function labelWords(doc) {
  return [
    doc.scopes?.length ? `scopes ${doc.scopes.join(", ")}` : "universal",
    doc.category ? `category ${doc.category}` : null,
    doc.tags?.length ? `tags ${doc.tags.join(", ")}` : "no tags",
    Object.keys(doc.metadata ?? {}).length ? `metadata ${JSON.stringify(doc.metadata)}` : null,
  ].filter(Boolean).join("; ");
}

/** Say a refused label in `status` and put the focus on its field; other errors are thrown on. */
function refuseLabel(status, error) {
  if (!(error instanceof LabelError)) throw error;
  say(status, error.message, "error");
  error.field.setAttribute("aria-invalid", "true");
  error.field.focus();
}

// -- statistics -----------------------------------------------------------------------------------

/** The statistics, shown; resolves to them (null when they could not be read). */
async function loadStats() {
  const me = state.me;
  // As new as the list shown now, at least: a list read later that shows the same asks nothing.
  state.statsFor = state.listedAs;
  try {
    const stats = await api("/stats");
    if (state.me !== me) return null; // signed out (or in with another key) meanwhile
    const byStatus = stats.by_status ?? {};
    const items = [
      // Every document, as the list and the statuses count them (a failed one too); "Searchable": those
      // with a version that searches read.
      ["Documents", stats.documents],
      ["Searchable", stats.active_documents],
      ["Chunks", stats.chunks],
      ...Object.entries(byStatus).map(([status, count]) => [status, count]),
      ["Embedding model", stats.embedding_model],
    ];
    const migration = stats.migration;
    if (migration) {
      // Searches use the served model until the switch; this is how far the new one is built.
      items.push(["Migrating to", `${migration.target_model}: ${migration.done}/${migration.total} documents`]);
    }
    $("stats").replaceChildren(
      ...items.flatMap(([term, value]) => [
        el("div", { className: "stat" }, el("dt", {}, term), el("dd", {}, String(value ?? "–"))),
      ]),
    );
    recovered("Could not read the statistics");
    return stats;
  } catch (error) {
    if (state.me !== me) return null;
    // Not read: the next list read asks again (each second while a build is followed), rather than
    // leaving the failure said until the watch's next look.
    state.statsFor = null;
    fail("Could not read the statistics", error);
    return null;
  }
}

// -- the document table ---------------------------------------------------------------------------

function filterQuery() {
  const form = $("filters").elements;
  const query = new URLSearchParams({ limit: "200" });
  for (const name of ["status", "scope", "category", "name_contains"]) {
    const value = form[name].value.trim();
    if (value) query.set(name, value);
  }
  return query;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "";
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`;
}

function actionButton(label, handler, doc) {
  return el("button", {
    type: "button",
    className: `action ${label.toLowerCase().replace(/\W+/g, "-")}`,
    "aria-label": `${label} ${doc.name}`,
    disabled: state.acting.has(doc.id),
    onclick: handler,
  }, label);
}

const rowButtons = (doc) => document.querySelectorAll(`#documents tr[data-id="${CSS.escape(doc.id)}"] button.action`);

/** Hold a document's action buttons while an action on it is on its way: a double click or a slow
 * network would otherwise send it twice (a second re-ingest builds the document twice). */
function hold(doc) {
  state.acting.add(doc.id);
  const row = document.querySelector(`#documents tr[data-id="${CSS.escape(doc.id)}"]`);
  // A disabled button loses the focus to the page: a keyboard user's goes to the document's name.
  if (row?.contains(document.activeElement)) row.querySelector("button.link")?.focus();
  for (const button of rowButtons(doc)) button.disabled = true;
}

const buttonName = (button) => button.getAttribute("aria-label") ?? button.textContent;

/**
 * Name each cell of `table`'s body by its column's heading (`data-label`): under 800 px a row is a
 * block of lines (pages.css, table.stacked), its header row out of sight, so each field says what it
 * is. The row's own heading (its name) and a cell across the columns need none.
 */
function labelCells(table) {
  const headings = [...table.tHead.rows[0].cells].map((cell) => cell.textContent);
  for (const row of table.tBodies[0].rows) {
    for (const cell of row.cells) {
      if (cell.localName === "td" && cell.colSpan === 1) cell.dataset.label = headings[cell.cellIndex];
    }
  }
}

/**
 * Draw the table's rows, keeping the keyboard focus where it was: on the same button of the same
 * document, else on the document's name (its buttons change with its status). The table is drawn
 * again every second while a document is built, which would otherwise drop the focus each time.
 */
function drawRows(body, rows) {
  const focused = body.contains(document.activeElement) ? document.activeElement : null;
  const id = focused?.closest("tr")?.dataset.id;
  const name = focused && buttonName(focused);
  const place = focused ? [...body.rows].indexOf(focused.closest("tr")) : -1;
  body.replaceChildren(...rows);
  labelCells(body.closest("table"));
  if (!id) return;
  const row = body.querySelector(`tr[data-id="${CSS.escape(id)}"]`);
  if (!row) {
    // Its document is gone (deleted, or filtered out): the focus would fall to the page's top. It goes
    // to the document that took its place, else the one before it, else the table's heading.
    const near = rows[Math.min(place, rows.length - 1)];
    (near?.querySelector("button.link") ?? $("documents-title")).focus();
    return;
  }
  const same = [...row.querySelectorAll("button")].find((button) => buttonName(button) === name && !button.disabled);
  (same ?? row.querySelector("button.link"))?.focus();
}

/**
 * The action on `doc` was answered. Its buttons on screen stay held until the list is drawn again with
 * the ones its new status offers; a `refused` action changed nothing, so they come back at once.
 */
function answered(doc, { refused = false } = {}) {
  state.acting.delete(doc.id);
  if (refused) for (const button of rowButtons(doc)) button.disabled = false;
}

function actions(doc, next) {
  const buttons = [];
  if (doc.status === "pending") buttons.push(actionButton("Ingest", () => act(doc, "index"), doc));
  if (doc.status === "queued" || doc.status === "processing" || next) {
    buttons.push(actionButton("Cancel", () => act(doc, "cancel"), doc));
  }
  // A failed upload keeps no original: re-ingesting it needs the file again, so no button offers it.
  if ((doc.status === "completed" || doc.status === "failed") && doc.reingestable && !next) {
    buttons.push(actionButton("Re-ingest", () => act(doc, "reingest"), doc));
  }
  buttons.push(actionButton("Delete", () => remove(doc), doc));
  return el("td", { className: "admin-only actions" }, ...buttons);
}

function statusCell(doc, next) {
  const cell = el("td", { className: "status" }, el("span", { className: `badge ${doc.status}` }, doc.status));
  if (doc.status === "failed" && doc.error) cell.append(el("p", { className: "error" }, doc.error));
  if (doc.attempts > 1) cell.append(el("span", { className: "attempts" }, ` (attempt ${doc.attempts})`));
  if (next) {
    cell.append(el("p", { className: "next-version" },
      `version ${next.version}: `, el("span", { className: `badge ${next.status}` }, next.status)));
  }
  return cell;
}

/** `next`: the version being built to replace `doc`, while it is queued or processing. */
function documentRow(doc, next) {
  const scopes = doc.scopes?.length ? doc.scopes.join(", ") : "Universal";
  return el(
    "tr",
    { dataset: { id: doc.id, status: doc.status, ...(next ? { next: next.status } : {}) } },
    el("th", { scope: "row" },
      el("button", { type: "button", className: "link", onclick: () => showDetail(doc.id) }, doc.title || doc.name),
      doc.title && doc.title !== doc.name ? el("span", { className: "file-name" }, doc.name) : null),
    el("td", {}, String(doc.version ?? "")),
    statusCell(doc, next),
    el("td", { className: "number" }, String(doc.vector_count ?? "")),
    el("td", { className: doc.scopes?.length ? "" : "universal" }, scopes),
    el("td", {}, doc.category ?? ""),
    el("td", {}, (doc.tags ?? []).join(", ")),
    // When the document was first added, and when the version shown was made (a replacement's time).
    el("td", {}, formatDate(doc.added_at)),
    el("td", {}, formatDate(doc.created_at)),
    el("td", { className: "number" }, duration(doc.duration_ms)),
    el("td", {}, doc.embedding_model ?? ""),
    isAdmin() ? actions(doc, next) : null,
  );
}

/**
 * The builds in progress the key sees (`GET /builds`: one request, whoever started them: this page,
 * another admin's, the CLI, the API), and while the page follows some, the failures of the last hour.
 * A model migration's builds are left out: the statistics show them as "Migrating to".
 */
async function readBuilds() {
  const query = new URLSearchParams({ limit: "1000" });
  if (state.building.size) query.set("failed_within", FAILED_WITHIN);
  const { builds } = await api(`/builds?${query}`);
  return builds.filter((build) => !build.migration);
}

/** What the page has seen of the builds in progress: a change means the list is to be read again. */
const buildsSeen = (builds) =>
  builds.filter((b) => BUILDING.has(b.status)).map((b) => `${b.version_id}:${b.status}`).sort().join(" ");

/**
 * The builds replacing the serving version of a listed document, by document id (the newest, while
 * queued or processing), now followed; a followed build that ended is forgotten (the list then shows
 * it), and one that failed is said with why.
 */
function nextVersions(builds, listed) {
  const found = new Map();
  const ids = new Set(listed.map((doc) => doc.id));
  for (const build of builds) {
    if (!BUILDING.has(build.status) || build.current_version === null || !ids.has(build.document_id)) continue;
    if ((found.get(build.document_id)?.version ?? 0) < build.version) found.set(build.document_id, build);
  }
  const same = (id, version) => (build) => build.document_id === id && build.version === version;
  for (const [id, version] of state.building) {
    if (builds.some((build) => same(id, version)(build) && BUILDING.has(build.status))) continue;
    const failed = builds.find((build) => same(id, version)(build) && build.status === "failed");
    const doc = listed.find((listedDoc) => listedDoc.id === id);
    // Ended between the list's answer and the builds': the list still shows the version before, so
    // it is read again (a few times at most) before the end is said.
    const late = state.late.get(id) ?? 0;
    if (!failed && doc && doc.version < version && late < 3) {
      state.late.set(id, late + 1);
      continue;
    }
    state.building.delete(id);
    state.late.delete(id);
    if (failed && state.cancelled.has(id)) {
      say($("admin-status"), `Cancelled re-ingesting ${failed.name} (version ${version}).`);
    } else if (failed) {
      say($("admin-status"), `Re-ingesting ${failed.name} failed (version ${version}): ${failed.error || "no reason given"}`, "error");
    } else if (doc && doc.version >= version) {
      say($("admin-status"), `Re-ingested ${doc.name}: version ${doc.version} serves searches now.`);
    }
    state.cancelled.delete(id);
  }
  for (const [id, build] of found) state.building.set(id, build.version);
  return found;
}

/**
 * What of a listed page the statistics count: the total, and each document's status and version (a
 * build that ends changes one; the chunks and "Searchable" change with it). Labels change nothing
 * there.
 */
const listedAs = (page) => JSON.stringify([page.total, page.documents.map((doc) => [doc.id, doc.status, doc.version])]);

/**
 * The list, and the statistics when what they count changed since they were read. `statsRead`: the
 * caller has just read them (the watch, with the builds this list follows), so this list does not ask
 * again; a build ending in the moment between is counted at the watch's next look.
 */
async function loadDocuments({ statsRead = false } = {}) {
  clearTimeout(state.pollTimer);
  const listing = ++state.listing;
  try {
    const [page, builds] = await Promise.all([api(`/documents?${filterQuery()}`), readBuilds()]);
    if (listing !== state.listing) return; // filters changed (or a refresh ran) meanwhile
    state.seenBuilds = buildsSeen(builds);
    followAdded(builds, page.documents);
    const building = nextVersions(builds, page.documents);
    const next = (doc) => {
      const version = building.get(doc.id);
      return version && version.version > doc.version ? version : undefined;
    };
    state.listed = page.documents;
    state.listedAs = listedAs(page);
    // The statistics only when what they count changed since they were asked for: read at every poll
    // too, a followed upload cost three requests a second where two do, and under a tight per-key
    // rate limit (CITELINE_API_RATE_LIMIT) reached its end later. A build that ends shows here first,
    // so the statistics count it right after; watch reads them every few seconds whatever the list
    // says (a migration's progress, which the list does not show, or a read that failed). Other
    // filters read them once more.
    if (statsRead) state.statsFor = state.listedAs;
    if (state.listedAs !== state.statsFor) loadStats();
    const body = $("documents").querySelector("tbody");
    drawRows(body, page.documents.map((doc) => documentRow(doc, next(doc))));
    if (!page.documents.length) {
      body.replaceChildren(el("tr", {}, el("td", { colSpan: 12, className: "empty" }, "No documents.")));
    }
    recovered("Could not list the documents");
    $("documents-count").textContent =
      `${page.total} document${page.total === 1 ? "" : "s"}${page.total > page.documents.length ? `, the first ${page.documents.length} shown` : ""}`;
    // Live while anything is being ingested and the page is seen: poll until every document has
    // finished (a page shown again looks afresh, see watch).
    if (busy(page.documents) && !document.hidden) {
      state.pollTimer = setTimeout(refresh, POLL_MS);
    }
  } catch (error) {
    if (listing !== state.listing) return;
    if (error?.status === 429 && busy(state.listed)) {
      // Over the key's requests a minute while builds are followed (a large upload): nothing is wrong,
      // and the list is read again once the server's wait is over; said, not called a failure.
      say($("admin-status"), `Could not list the documents: ${waitWords(error.retryAfter ?? 1, error)}`, "info");
    } else {
      fail("Could not list the documents", error);
    }
    // A read refused (over the key's requests a minute: api waits as the server asks before the next)
    // or failed does not end following what is being ingested: polling stopped there, and once the
    // builds ended the page said "being ingested" for good, nothing left to tell it otherwise.
    if (busy(state.listed) && !document.hidden) state.pollTimer = setTimeout(refresh, POLL_MS);
  }
}

/** Whether the page follows something being ingested, with `listed` the documents last listed. */
const busy = (listed) => Boolean(state.building.size || following() || listed.some((doc) => BUILDING.has(doc.status)));

/** The list (and the statistics, if what they count changed) and the open detail, read again. */
function refresh() {
  loadDocuments();
  if (state.detailId) showDetail(state.detailId, { keepChunks: true });
}

// -- builds started elsewhere ---------------------------------------------------------------------

/**
 * While the page is visible, every few seconds: the statistics, and the builds in progress; when
 * those changed (an upload, a re-ingest or a refresh started on another page, by the CLI or over the
 * API, or one that ended), the list again, following any build of a listed document. A hidden page
 * stops asking.
 */
async function watch() {
  clearTimeout(state.watchTimer);
  const run = ++state.watchRun;
  if (!state.me || document.hidden) return;
  const [stats, builds] = await Promise.all([loadStats(), readBuilds().catch(() => null)]);
  if (run !== state.watchRun) return;
  // Unread builds (a moment without the server) change nothing: the list says its own failure.
  if (builds === null ? state.seenBuilds === null : buildsSeen(builds) !== state.seenBuilds) {
    // At sign-in, and on a page shown again, the statistics just read are the list's: read twice
    // before, once by each.
    await loadDocuments({ statsRead: stats !== null });
  }
  if (run === state.watchRun && state.me && !document.hidden) state.watchTimer = setTimeout(watch, WATCH_MS);
}

// Files still being sent when the tab is closed or reloaded would stop there, the rest never sent: the
// browser asks first.
window.addEventListener("beforeunload", (event) => {
  if (!state.adding) return;
  event.preventDefault();
  event.returnValue = ""; // what browsers before the standard preventDefault read
});

document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    state.watchRun += 1;
    clearTimeout(state.watchTimer);
    clearTimeout(state.pollTimer);
    return;
  }
  state.seenBuilds = null; // shown again: what changed meanwhile is looked at now
  watch();
});

async function act(doc, action) {
  const words = { index: "queue", cancel: "cancel", reingest: "re-ingest" }[action];
  hold(doc);
  try {
    const built = await api(`/documents/${encodeURIComponent(doc.id)}/${action}`, { method: "POST" });
    if (action === "reingest" && built?.version !== undefined) state.building.set(doc.id, built.version);
    if (action === "cancel") state.cancelled.add(doc.id); // followed until it ends: then says so
    if (action === "reingest") state.cancelled.delete(doc.id);
    say($("admin-status"), "");
    answered(doc);
  } catch (error) {
    answered(doc, { refused: true });
    fail(`Could not ${words} ${doc.name}`, error);
  }
  refresh();
}

async function remove(doc) {
  if (!confirm(`Delete ${doc.name} with every version, its chunks and its file? This cannot be undone.`)) return;
  hold(doc);
  try {
    await api(`/documents/${encodeURIComponent(doc.id)}`, { method: "DELETE" });
    if (state.detailId === doc.id) closeDetail();
    say($("admin-status"), `Deleted ${doc.name}.`);
    answered(doc);
  } catch (error) {
    answered(doc, { refused: true });
    fail(`Could not delete ${doc.name}`, error);
  }
  refresh();
}

// -- adding documents -----------------------------------------------------------------------------

/** The labels fieldset's values, as sent; throws a {@link LabelError} for one the API would refuse. */
function labels() {
  const form = $("upload-form").elements;
  const out = {
    scopes: names(form.scopes, "scope", "leave it empty for universal documents, which every search sees"),
    category: categoryOf(form.category),
    tags: names(form.tags, "tag", "leave it empty for no tags"),
  };
  for (const name of ["chunk_size", "chunk_overlap"]) {
    if (form[name].value) out[name] = Number(form[name].value);
  }
  return out;
}

function showChosen() {
  const files = [...$("files").files];
  $("chosen-files").replaceChildren(...files.map((file) => el("li", {}, `${file.name} (${Math.ceil(file.size / 1024)} KB)`)));
}

/** While files or a web page are being added, the add buttons wait (a double click added them twice). */
function adding(on) {
  state.adding = on;
  const buttons = [...$("add").querySelectorAll('button[type="submit"]')];
  const status = $("add-status");
  if (on) {
    // A disabled button drops the keyboard's focus to the top of the page: the status (saying what
    // is being added) holds it meanwhile, and gives it back to the button after.
    state.addFocus = buttons.find((button) => button === document.activeElement) ?? null;
    if (state.addFocus) status.focus();
  }
  for (const button of buttons) button.disabled = on;
  if (!on) {
    const lost = document.activeElement === status || document.activeElement === document.body;
    if (state.addFocus && lost) state.addFocus.focus();
    state.addFocus = null;
  }
}

/** The add form's labels, or null once `status` says why they are refused (the field focused). */
function labelsOrRefuse(status) {
  try {
    return labels();
  } catch (error) {
    refuseLabel(status, error);
    return null;
  }
}

/** `words` about the file `name`, naming it once: the API's messages often begin with it already. */
const named = (name, words) => (words.startsWith(`${name}:`) ? words : `${name}: ${words}`);

/** A document just added, to follow until its build ends: `outcome` is then ingested, failed or deleted. */
function followed(doc) {
  const settled = { completed: "ingested", failed: "failed" }[doc.status];
  return {
    id: doc.id,
    name: doc.name,
    version: doc.version,
    outcome: settled,
    error: doc.error,
    checking: false,
    same: doc.same_content_as ?? [], // the stored documents holding the same bytes, by name
    scopes: doc.scopes ?? [],
  };
}

/**
 * The current version of the stored document `id`: the list's, else read once (null if it cannot be,
 * deleted meanwhile, say: the name is said without it).
 */
function currentVersion(id) {
  const listed = state.listed.find((doc) => doc.id === id);
  if (listed) return Promise.resolve(listed.version);
  if (!state.sameVersions.has(id)) {
    state.sameVersions.set(id, api(`/documents/${encodeURIComponent(id)}`).then((doc) => doc.version, () => null));
  }
  return state.sameVersions.get(id);
}

/**
 * Say which uploaded files hold the same bytes as documents already stored under another name (the
 * upload's `same_content_as`), each next to its file with a button opening that document: the file is
 * stored all the same, and the administrator may rather relabel the one already there.
 */
function showSameContent(uploaded) {
  const list = $("add-same");
  const scoped = (scopes) => (scopes.length ? `scopes ${scopes.join(", ")}` : "universal");
  const sameScopes = (a, b) => a.length === b.length && a.every((scope) => b.includes(scope));
  const items = uploaded.filter((doc) => doc.same.length).map((doc) => {
    // A copy under other scopes (none, say) is seen by other readers than the document stored: the
    // scopes of both are said, not only that the bytes are the same.
    const differ = doc.same.filter((other) => !sameScopes(other.scopes ?? [], doc.scopes));
    return el("li", {}, `${doc.name}: same content as `, ...doc.same.flatMap((other, n) => {
      const scopes = differ.includes(other) ? scoped(other.scopes ?? []) : null;
      const facts = el("span", { className: "version" }, scopes ? ` (${scopes})` : "");
      currentVersion(other.document_id).then((found) => {
        const known = found !== null && found !== undefined ? `version ${found}` : null;
        const said = [known, scopes].filter(Boolean).join(", ");
        facts.textContent = said ? ` (${said})` : "";
      });
      return [
        n ? ", " : null,
        el("button", {
          type: "button",
          className: "link",
          "aria-label": `Open ${other.name}`,
          onclick: () => showDetail(other.document_id),
        }, other.name),
        facts,
      ];
    }), differ.length ? (doc.scopes.length ? `; this copy has ${scoped(doc.scopes)}` : "; this copy is universal") : null);
  });
  list.replaceChildren(...items);
  list.hidden = !items.length;
}

/** Whether something added here is still being ingested (the list then refreshes every second). */
const following = () => Boolean(state.added?.docs.some((doc) => doc.outcome === undefined));

/**
 * What became of the files uploaded: how many the server took, of those how many were ingested and
 * how many failed to ingest (each with why), and each refused with why. Taken is not ingested: a file
 * the server accepted may still fail (empty, not the type its name says).
 */
function uploadWords(heading, uploaded, refused) {
  const ingested = uploaded.filter((doc) => doc.outcome === "ingested").length;
  const failed = uploaded.filter((doc) => doc.outcome === "failed");
  const deleted = uploaded.filter((doc) => doc.outcome === "deleted").length;
  const building = uploaded.length - ingested - failed.length - deleted;
  let text;
  if (!uploaded.length) text = `${heading}.`;
  else if (building === uploaded.length) text = `${heading}; ${building === 1 ? "it is" : "they are"} being ingested.`;
  else {
    const counts = [
      ingested ? `${ingested} ingested` : null,
      failed.length ? `${failed.length} failed to ingest` : null,
      deleted ? `${deleted} deleted before ${deleted === 1 ? "it was" : "they were"} ingested` : null,
      building ? `${building} being ingested` : null,
    ];
    text = `${heading}: ${counts.filter(Boolean).join(", ")}.`;
  }
  if (failed.length) text += ` Failed to ingest: ${failed.map((doc) => named(doc.name, doc.error || "no reason given")).join("; ")}.`;
  if (refused.length) text += ` Not uploaded: ${refused.join("; ")}`;
  return [text, failed.length || refused.length ? "error" : "info"];
}

/** What became of a web page added: fetched and ingested, or why not. */
function pageWords(heading, page) {
  if (page.outcome === undefined) return [`${heading}; it is being ingested.`, "info"];
  if (page.outcome === "ingested") return [`${heading}: ingested.`, "info"];
  if (page.outcome === "deleted") return [`${heading}; it was deleted before it was ingested.`, "info"];
  return [`${heading}; it failed to ingest: ${page.error || "no reason given"}`, "error"];
}

/** Say what became of what was added last; said again only when it changed (it is a live region). */
function sayAdded() {
  if (!state.added) return;
  const [text, kind] = state.added.words();
  const status = $("add-status");
  if (status.textContent !== text || status.dataset.kind !== kind) say(status, text, kind);
}

/**
 * Follow what was added last with the builds and the list just read: one no longer queued or
 * processing has ended, and the list says how (ingested, or failed and why); one the list does not
 * show (filtered out) is read once (gone if deleted meanwhile), a few at each refresh.
 */
function followAdded(builds, listed) {
  const added = state.added;
  if (!added) return;
  let reads = added.docs.filter((doc) => doc.checking).length;
  for (const doc of added.docs) {
    if (doc.outcome !== undefined || doc.checking) continue;
    const build = builds.find((b) => b.document_id === doc.id && b.version === doc.version);
    if (build && BUILDING.has(build.status)) continue;
    const shown = listed.find((d) => d.id === doc.id && d.version === doc.version);
    if (shown) {
      doc.outcome = { completed: "ingested", failed: "failed" }[shown.status];
      doc.error = shown.error;
      continue;
    }
    if (reads >= FOLLOW_READS) continue;
    reads += 1;
    doc.checking = true;
    api(`/documents/${encodeURIComponent(doc.id)}?version=${encodeURIComponent(doc.version)}`)
      .then((found) => {
        // Still queued (listed before its build was): looked at again with the next builds read.
        doc.outcome = { completed: "ingested", failed: "failed" }[found.status];
        doc.error = found.error;
      })
      .catch((error) => {
        if (error?.status === 404) doc.outcome = "deleted";
      })
      .finally(() => {
        doc.checking = false;
        if (state.added === added) sayAdded();
      });
  }
  sayAdded();
}

async function upload(files) {
  const status = $("add-status");
  if (state.adding) return say(status, "Files are being added: drop these again once they are.", "error");
  state.added = null; // what was added before is no longer said over what this add says
  state.sameVersions.clear();
  showSameContent([]);
  const given = labelsOrRefuse(status);
  if (!given) return;
  say(status, `Uploading ${files.length} file${files.length === 1 ? "" : "s"}…`);
  adding(true);
  const uploaded = []; // the documents the server took, followed until each is ingested or failed
  const failures = [];
  const labelled = new Set(); // the labels the server gave the uploaded files, in words
  const me = state.me;
  let listedAt = 0;
  for (const file of files) {
    if (state.me !== me) break; // signed out meanwhile: the rest are not sent with no key
    const position = `${uploaded.length + failures.length + 1} of ${files.length}`;
    say(status, `Uploading ${file.name} (${position})…`);
    const form = new FormData();
    form.append("file", file, file.name);
    for (const scope of given.scopes) form.append("scopes", scope);
    for (const tag of given.tags) form.append("tags", tag);
    if (given.category) form.append("category", given.category);
    if (given.chunk_size) form.append("chunk_size", String(given.chunk_size));
    if (given.chunk_overlap !== undefined) form.append("chunk_overlap", String(given.chunk_overlap));
    for (let waits = 0; ; waits += 1) {
      // Another of the page's requests (the list, a build followed) was refused over the limit: this
      // one waits as asked before it is sent, and the page says so rather than "Uploading…" all along.
      const quiet = quietWait();
      if (quiet) say(status, `Uploading ${file.name} (${position}): ${waitWords(quiet.seconds, quiet.error)}`);
      try {
        const doc = await api("/documents", { method: "POST", form });
        labelled.add(labelWords(doc));
        uploaded.push(followed(doc));
        showSameContent(uploaded);
      } catch (error) {
        // Over the key's requests a minute: nothing is wrong with the file, so it waits as asked and
        // goes again, rather than being said not uploaded.
        if (error?.status === 429 && waits < RATE_LIMIT_WAITS && state.me === me) {
          const seconds = error.retryAfter ?? 10;
          say(status, `Uploading ${file.name} (${position}): ${waitWords(seconds, error)}`);
          await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
          continue;
        }
        // The API's message names the file already ("a.exe: unsupported file type"); say it once.
        failures.push(named(file.name, describeError(error)));
      }
      break;
    }
    if (Date.now() - listedAt >= UPLOAD_LIST_MS) {
      listedAt = Date.now();
      loadDocuments();
    }
  }
  const count = `${files.length} file${files.length === 1 ? "" : "s"}`;
  const heading = uploaded.length ? `Uploaded ${uploaded.length} of ${count} (${[...labelled].join(" | ")})` : `Uploaded none of ${count}`;
  state.added = { docs: uploaded, words: () => uploadWords(heading, uploaded, failures) };
  sayAdded();
  $("files").value = "";
  showChosen();
  adding(false);
  refresh();
}

async function addUrl(url) {
  const status = $("add-status");
  if (state.adding) return;
  state.added = null;
  showSameContent([]);
  const given = labelsOrRefuse(status);
  if (!given) return;
  say(status, `Adding ${url}…`);
  adding(true);
  try {
    const doc = await api("/documents", { method: "POST", json: { url, ...given } });
    const page = followed(doc);
    state.added = { docs: [page], words: () => pageWords(`Added ${doc.name} (${labelWords(doc)})`, page) };
    sayAdded();
    $("url-form").reset();
  } catch (error) {
    say(status, `Could not add ${url}: ${describeError(error)}`, "error");
  }
  adding(false);
  refresh();
}

function setUpAdding() {
  const zone = $("drop-zone");
  const input = $("files");
  zone.addEventListener("keydown", (event) => {
    if (event.key === "Enter" || event.key === " ") {
      event.preventDefault();
      input.click();
    }
  });
  zone.addEventListener("dragover", (event) => {
    event.preventDefault();
    zone.classList.add("over");
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("over"));
  zone.addEventListener("drop", (event) => {
    event.preventDefault();
    zone.classList.remove("over");
    const files = [...event.dataTransfer.files];
    if (files.length) upload(files);
  });
  input.addEventListener("change", showChosen);
  $("upload-form").addEventListener("submit", (event) => {
    event.preventDefault();
    const files = [...input.files];
    if (!files.length) {
      state.added = null;
      return say($("add-status"), "Choose or drop at least one file.", "error");
    }
    upload(files);
  });
  $("url-form").addEventListener("submit", (event) => {
    event.preventDefault();
    addUrl($("url-form").elements.url.value.trim());
  });
}

// -- a document's detail --------------------------------------------------------------------------

function fact(term, value) {
  return [el("dt", {}, term), el("dd", {}, value === null || value === undefined || value === "" ? "–" : String(value))];
}

/**
 * Who sent a version (`uploaded_by`): an API key's "key:<id>", named as the keys list names it where the
 * page has read that list; `citeline ingest`'s "cli:<login name>" as that user on the command line; any
 * other (a library script's user id, "local" unless it names one) as it is.
 */
function uploader(by) {
  if (!by) return "";
  if (by === "cli") return "command line";
  if (by.startsWith("cli:")) return `${by.slice(4)} (command line)`;
  const id = by.startsWith("key:") ? by.slice(4) : null;
  const name = id && state.keyNames.get(id);
  return name ? `${name} (key)` : by;
}

async function showDetail(id, { keepChunks = false } = {}) {
  const section = $("detail");
  if (state.detailId !== id) state.chunkOffset = 0;
  state.detailId = id;
  const ref = encodeURIComponent(id);
  try {
    const [doc, versions] = await Promise.all([
      api(`/documents/${ref}`),
      // Versions are an admin's to read: a reader's request would only be refused (a 403 in the console).
      isAdmin() ? api(`/documents/${ref}/versions`).catch(() => null) : null,
    ]);
    if (state.detailId !== id) return;
    $("detail-title").textContent = doc.title || doc.name;
    $("detail-facts").replaceChildren(
      ...fact("Name", doc.name),
      ...fact("Document id", doc.id),
      ...fact("Version", doc.version),
      ...fact("Status", doc.status),
      ...(doc.error ? fact("Error", doc.error) : []),
      ...fact("Content type", doc.content_type),
      ...fact("Pages", doc.page_count),
      ...fact("Vectors", doc.vector_count),
      ...fact("Scopes", doc.scopes?.length ? doc.scopes.join(", ") : "Universal"),
      ...fact("Category", doc.category),
      ...fact("Tags", (doc.tags ?? []).join(", ")),
      ...fact("Metadata", Object.keys(doc.metadata ?? {}).length ? JSON.stringify(doc.metadata) : ""),
      ...fact("Added", formatDate(doc.added_at)),
      ...fact("Updated", formatDate(doc.created_at)),
      ...fact("Uploaded by", uploader(doc.uploaded_by)),
      ...fact("Duration", duration(doc.duration_ms)),
      ...fact("Embedding model", doc.embedding_model),
    );
    const items = versions?.versions ?? (Array.isArray(versions) ? versions : [doc]);
    $("detail-versions").replaceChildren(
      ...items.map((v) => el("li", {}, `version ${v.version}: ${v.status}, ${formatDate(v.created_at)}${v.vector_count ? `, ${v.vector_count} vectors` : ""}`)),
    );
    $("detail-source").textContent = JSON.stringify(doc.source_metadata ?? {}, null, 2);
    // Filled when the detail opens, not at each refresh, which would undo what is being typed.
    if (!keepChunks) fillRelabel(doc);
    section.hidden = false;
    if (!keepChunks) {
      if (!(await loadChunks())) return;
      section.focus();
      section.scrollIntoView({ block: "start" });
    }
  } catch (error) {
    fail("Could not open the document", error);
  }
}

function fillRelabel(doc) {
  const form = $("relabel-form");
  const fields = form.elements;
  fields.scopes.value = (doc.scopes ?? []).join(", ");
  fields.category.value = doc.category ?? "";
  fields.tags.value = (doc.tags ?? []).join(", ");
  fields.metadata.value = Object.keys(doc.metadata ?? {}).length ? JSON.stringify(doc.metadata) : "";
  for (const field of fields) field.removeAttribute("aria-invalid");
  say($("relabel-status"), "");
  state.labelled = doc;
}

/** The metadata field: a JSON object, {} when empty (which removes the document's metadata). */
function metadataOf(field) {
  const text = field.value.trim();
  if (!text) return {};
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new LabelError(`Metadata: not JSON (${error.message}); write an object such as {"site": "north"}.`, field);
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new LabelError('Metadata: write a JSON object such as {"site": "north"}, or leave it empty.', field);
  }
  return value;
}

/**
 * PATCH /documents/{id} with the relabel form's labels, every field given (an empty one removes that
 * label); says what the server stored, or why not.
 */
async function relabel() {
  const doc = state.labelled;
  const fields = $("relabel-form").elements;
  const status = $("relabel-status");
  const body = {};
  try {
    body.scopes = names(fields.scopes, "scope", "leave it empty to make the document universal");
    body.tags = names(fields.tags, "tag", "leave it empty for no tags");
    body.metadata = metadataOf(fields.metadata);
    body.category = categoryOf(fields.category) ?? ""; // "" removes the category (left out keeps it)
  } catch (error) {
    return refuseLabel(status, error);
  }
  $("relabel").disabled = true;
  say(status, `Saving the labels of ${doc.name}…`);
  try {
    const saved = await api(`/documents/${encodeURIComponent(doc.id)}`, { method: "PATCH", json: body });
    if (state.detailId === doc.id) fillRelabel(saved);
    say(status, `Saved: ${labelWords(saved)}.`);
  } catch (error) {
    say(status, `Could not change the labels of ${doc.name}: ${describeError(error)}`, "error");
  } finally {
    $("relabel").disabled = false;
  }
  refresh();
}

/** The detail's page of chunks; false when another document or page was asked for meanwhile. */
async function loadChunks() {
  const asked = ++state.chunkRequest;
  const offset = state.chunkOffset;
  const ref = encodeURIComponent(state.detailId);
  const page = await api(`/documents/${ref}/chunks?limit=${CHUNKS_PER_PAGE}&offset=${offset}`);
  // On a slow network the chunks of the document opened before could come last, under this one.
  if (asked !== state.chunkRequest) return false;
  state.chunkTotal = page.total;
  $("chunks").querySelector("tbody").replaceChildren(
    ...page.chunks.map((chunk) =>
      el("tr", {},
        el("td", { className: "number" }, String(chunk.index)),
        el("td", { className: "number" }, String(chunk.page ?? "")),
        el("td", { className: "number" }, `${chunk.start}–${chunk.end}`),
        el("td", { className: "chunk-text" }, chunk.text)),
    ),
  );
  const last = Math.min(offset + page.chunks.length, page.total);
  $("chunks-range").textContent = page.total ? `chunks ${offset + 1}–${last} of ${page.total}` : "no chunks";
  // A button disabled under the focus (Next on the last page) drops it to the body, out of the detail
  // (whose Escape then no longer closes it): it goes to the other button, or to Close.
  const pagers = [$("chunks-prev"), $("chunks-next")];
  const focused = pagers.find((button) => button === document.activeElement);
  pagers[0].disabled = offset === 0;
  pagers[1].disabled = last >= page.total;
  if (focused?.disabled) (pagers.find((button) => !button.disabled) ?? $("close-detail")).focus();
  return true;
}

function closeDetail() {
  const id = state.detailId;
  state.detailId = null;
  const section = $("detail");
  // A focus lost to the body is taken back too: Escape pressed there closed the detail.
  const hadFocus = section.contains(document.activeElement) || document.activeElement === document.body;
  section.hidden = true;
  // Back to the document's name in the table, as the chat page goes back to its [n].
  if (hadFocus && id) document.querySelector(`#documents tr[data-id="${CSS.escape(id)}"] button.link`)?.focus();
}

// -- keys -----------------------------------------------------------------------------------------

async function loadKeys() {
  const me = state.me;
  try {
    const { keys } = await api("/keys");
    if (state.me !== me) return; // signed out (or in with another key) meanwhile
    state.keyNames = new Map(keys.map((key) => [key.id, key.name || key.prefix]));
    $("key-table").querySelector("tbody").replaceChildren(
      ...keys.map((key) =>
        el("tr", { dataset: { id: key.id } },
          el("td", {}, key.name || "–"),
          el("td", {}, key.role),
          el("td", {}, key.scopes === null ? "every scope" : key.scopes.join(", ") || "universal only"),
          el("td", {}, key.prefix),
          el("td", {}, formatDate(key.created_at)),
          el("td", {}, formatDate(key.last_used_at) || "never"),
          el("td", {}, el("button", {
            type: "button",
            className: "action revoke",
            "aria-label": `Revoke the key ${key.name || key.prefix}`,
            onclick: () => revokeKey(key),
          }, "Revoke"))),
      ),
    );
    labelCells($("key-table"));
  } catch (error) {
    if (state.me !== me) return;
    fail("Could not list the keys", error);
  }
}

async function revokeKey(key) {
  if (!confirm(`Revoke the key ${key.name || key.prefix}? Requests with it are refused at once.`)) return;
  try {
    await api(`/keys/${encodeURIComponent(key.id)}`, { method: "DELETE" });
  } catch (error) {
    fail("Could not revoke the key", error);
  }
  loadKeys();
}

function setUpKeys() {
  $("key-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const form = event.target.elements;
    const status = $("key-status");
    // The key made before is not the one asked for now: whatever this create comes to, it is not shown
    // as if it were.
    $("new-key").hidden = true;
    $("new-key-value").replaceChildren();
    say(status, "");
    const body = { role: form.role.value, name: form.name.value.trim() };
    try {
      if (form.all_scopes.checked) body.all_scopes = true;
      else if (body.role === "reader") {
        // The server makes no reader key without a scope (nor does `citeline keys create`): said here,
        // before anything is sent, rather than advising an empty field it then refuses.
        const advice = "give at least one scope, or tick every scope";
        body.scopes = names(form.scopes, "scope", advice);
        if (!body.scopes.length) throw new LabelError(`Scopes: a reader key needs at least one; ${advice}.`, form.scopes);
      }
    } catch (error) {
      return refuseLabel(status, error);
    }
    try {
      const created = await api("/keys", { method: "POST", json: body });
      $("new-key-value").textContent = created.key;
      $("new-key").hidden = false;
      event.target.reset();
    } catch (error) {
      // Said by the form, as the upload and relabel forms say theirs, not at the top of the page.
      say(status, `Could not create the key: ${describeError(error)}`, "error");
      status.scrollIntoView({ block: "nearest" });
    }
    loadKeys();
  });
}

// -- start ----------------------------------------------------------------------------------------

/**
 * Forget what the signed-out key was shown (statistics, documents, a document's detail and chunks,
 * keys, what was typed): hidden is not gone, and the next key signed in in this tab may be a reader
 * of other scopes. Answers still on their way for the old key are not drawn.
 */
function forgetShown() {
  state.listing += 1;
  state.chunkRequest += 1;
  state.detailId = null;
  state.labelled = null;
  state.listed = [];
  state.seenBuilds = null;
  state.building.clear();
  state.cancelled.clear();
  state.late.clear();
  state.acting.clear();
  state.added = null;
  state.sameVersions.clear();
  showSameContent([]);
  $("detail").hidden = true;
  $("detail-title").textContent = "Document";
  const emptied = ["stats", "detail-facts", "detail-versions", "detail-source", "chunks-range", "documents-count"];
  for (const id of [...emptied, "new-key-value"]) $(id).replaceChildren();
  for (const table of ["documents", "chunks", "key-table"]) $(table).querySelector("tbody").replaceChildren();
  $("new-key").hidden = true;
  for (const form of ["upload-form", "url-form", "filters", "relabel-form", "key-form"]) $(form).reset();
  $("filters").elements.scope.replaceChildren(el("option", { value: "" }, "any"));
  showChosen();
  for (const status of ["admin-status", "add-status", "relabel-status", "key-status"]) say($(status), "");
}

function showSignIn() {
  forgetShown();
  clearTimeout(state.pollTimer);
  clearTimeout(state.watchTimer);
  state.watchRun += 1;
  $("admin").hidden = true;
  $("admin-controls").hidden = true;
  $("sign-in").hidden = false;
  $("key").focus();
}

function start(me) {
  state.me = me;
  document.body.classList.toggle("reader", !isAdmin());
  for (const node of document.querySelectorAll(".admin-only")) node.hidden = !isAdmin();
  $("whoami").textContent = isAdmin()
    ? "admin key"
    : `reader key: ${me.scopes.length ? me.scopes.join(", ") : "universal documents only"}`;
  const scope = $("filters").elements.scope;
  scope.replaceChildren(el("option", { value: "" }, "any"), ...me.scopes.map((name) => el("option", { value: name }, name)));
  $("sign-in").hidden = true;
  $("admin").hidden = false;
  $("admin-controls").hidden = false;
  $("new-key").hidden = true;
  // The sign-in form, which held the focus, is gone: it would fall to the page's top. It goes where the
  // page's work begins, as the chat page's goes to its question box: the upload, or for a reader (who
  // uploads nothing) the documents.
  if (document.activeElement === document.body || $("sign-in").contains(document.activeElement)) {
    (isAdmin() ? $("drop-zone") : $("documents-title")).focus();
  }
  state.seenBuilds = null;
  watch(); // the statistics and the list, then again every few seconds while the page is seen
  if (isAdmin()) loadKeys();
}

$("filters").addEventListener("submit", (event) => {
  event.preventDefault();
  loadDocuments();
});
$("filters").addEventListener("change", () => loadDocuments());
$("close-detail").addEventListener("click", closeDetail);
$("relabel-form").addEventListener("submit", (event) => {
  event.preventDefault();
  relabel();
});
// A field said to be wrong is no longer so once it is changed.
document.addEventListener("input", (event) => event.target.removeAttribute?.("aria-invalid"));
closeOnEscape($("detail"), closeDetail);
$("chunks-prev").addEventListener("click", () => {
  state.chunkOffset = Math.max(0, state.chunkOffset - CHUNKS_PER_PAGE);
  loadChunks().catch((error) => fail("Could not read the chunks", error));
});
$("chunks-next").addEventListener("click", () => {
  state.chunkOffset += CHUNKS_PER_PAGE;
  loadChunks().catch((error) => fail("Could not read the chunks", error));
});
$("sign-out").addEventListener("click", () => {
  forgetKey();
  state.me = null;
  state.keyNames = new Map(); // another key's names are not for the next one signed in
  showSignIn();
});
setUpAdding();
setUpKeys();
setUpSignIn($("sign-in-form"), $("sign-in-status"), start);
onKeyRefused((error) => {
  state.me = null;
  showSignIn();
  say($("sign-in-status"), `Signed out: ${describeError(error)}. Sign in again with a valid key.`, "error");
});

const me = await whoAmI();
if (me) start(me);
else showSignIn();
