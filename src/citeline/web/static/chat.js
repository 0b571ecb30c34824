// The chat page: sign in with a key, ask, read the answer as it streams with each [n] a link to its
// passage, open the passage at its page in the citation viewer. Every text from the server (answers,
// passages, document names) is inserted as text, never as HTML.

import {
  api,
  ApiError,
  authHeaders,
  checkRefused,
  closeOnEscape,
  describeError,
  requestNote,
  el,
  forgetKey,
  formatDate,
  onKeyRefused,
  responseError,
  say,
  send,
  setUpSignIn,
  whoAmI,
} from "./common.js";
import { CitationViewer } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const CITATION = /\[(\d+)\]/g;
// The conversation on screen, kept in the tab's session storage (as the key is) so a reload reopens it.
const CONVERSATION_STORAGE = "citeline.conversation";
// The scope chosen, kept the same way: a reload showing "All scopes" would search every scope.
const SCOPE_STORAGE = "citeline.scope";
// The question on its way, until its answer ends on this page: a reload mid-answer gives it back.
const ASKING_STORAGE = "citeline.asking";
// The questions on their way in conversations left for another ({id: {question, turn, before}}): a
// reload stops their answers, and the question is given back when its conversation is opened again.
const LEFT_STORAGE = "citeline.asking.left";
// How many conversations the list shows, most recent first. The API's default (50) left a key's
// older conversations out of reach without a word.
const CONVERSATIONS_LISTED = 200;

function setConversation(id) {
  state.conversationId = id;
  if (id) sessionStorage.setItem(CONVERSATION_STORAGE, id);
  else sessionStorage.removeItem(CONVERSATION_STORAGE);
}

const state = {
  conversationId: null,
  // Citation numbers continue through a conversation, so one map serves all its answers.
  citations: new Map(),
  documents: new Map(), // "id@version" -> promise of GET /documents/{id}?version=n (versions never change)
  currentDocuments: new Map(), // "id" -> {at, request}: the current version, asked again after a few seconds
  asks: new Set(), // the answers on their way, each of the conversation it was asked in
  unanswered: new Map(), // conversation id -> its ask that failed while another conversation was shown
  screen: 0, // counts the conversations drawn on screen: an ask belongs to the one it was drawn in
  // The newest conversation asked for (opened, started anew): an older one answering later is not shown.
  opening: 0,
  listing: 0, // the newest conversation list asked for: an older one answering later is not drawn
  conversations: null, // the list as the server gave it last (null: not read, or it could not be)
  current: null, // the citation shown in the panel
  viewer: null,
};

// -- streaming ------------------------------------------------------------------------------------

/** The answer's connection ended before its last event: what came is no whole answer. */
class CutOff extends Error {
  name = "CutOff";
  message = "The answer was cut off: the connection closed before it was complete. Ask again.";
}

/**
 * POST /chat/stream and call `onEvent(name, data)` for each server-sent event. EventSource cannot send
 * an Authorization header, so the stream is read with fetch: events are separated by a blank line,
 * comment lines (the heartbeat) start with ":".
 */
async function streamAnswer(body, signal, onEvent) {
  const response = await send("/chat/stream", {
    method: "POST",
    headers: { ...authHeaders(), "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw await responseError(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    let read;
    try {
      read = await reader.read();
    } catch (error) {
      // The server answered, then the connection broke (it stopped, a proxy dropped it): not "could not
      // be reached". Stop is an abort, said as such.
      if (error?.name === "AbortError") throw error;
      throw new CutOff();
    }
    const { value, done } = read;
    if (done) break;
    buffer += value.replaceAll("\r\n", "\n");
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (!data.length) continue;
      let payload;
      try {
        payload = JSON.parse(data.join("\n"));
      } catch {
        // The server's (or a proxy's) fault, not the page's: said as what came.
        throw new ApiError(`the server sent a ${name} event that is not JSON`, response.status);
      }
      onEvent(name, payload);
    }
  }
}

// -- rendering an answer --------------------------------------------------------------------------

/** The ranges of `text` that unsupported sentences cover, sorted. */
function unsupportedRanges(text, unsupported) {
  const ranges = [];
  for (const sentence of unsupported) {
    const at = text.indexOf(sentence.text);
    if (at >= 0) ranges.push([at, at + sentence.text.length]);
  }
  return ranges.sort((a, b) => a[0] - b[0]);
}

/**
 * Citation `number` as a button opening the passage it stands for now. The button keeps that passage:
 * an answer stopped or cut off was not stored, so the next answer may give its number to another one.
 */
function citationLink(number) {
  const citation = state.citations.get(number);
  const label = `[${number}]`;
  if (!citation) return el("span", { className: "cite pending" }, label);
  if (citation.available === false) {
    return el(
      "button",
      {
        type: "button",
        className: "cite gone",
        title: "No longer available",
        "aria-label": `Citation ${number}: no longer available`,
        dataset: { number: String(number) },
        onclick: () => showCitation(citation),
      },
      label,
    );
  }
  const unsupported = citation.supported === false;
  return el(
    "button",
    {
      type: "button",
      className: unsupported ? "cite unsupported" : "cite",
      title: `${citation.document_name}, ${place(citation)}${unsupported ? " (not supported)" : ""}`,
      "aria-label": `Citation ${number}: ${citation.document_name}, ${place(citation)}${
        unsupported ? ", not supported by the passage" : ""
      }`,
      dataset: { number: String(number) },
      onclick: () => showCitation(citation),
    },
    label,
  );
}

/**
 * Where a cited passage is, as a reader finds it: a CSV's rows of the file ("row 7", "rows 12–14", as a
 * spreadsheet numbers them; its "page 1" says nothing), else its page ("page 3").
 */
function place(citation) {
  const rows = citation.rows;
  if (!rows) return `page ${citation.page}`;
  return rows[0] === rows[1] ? `row ${rows[0]}` : `rows ${rows[0]}–${rows[1]}`;
}

/** Text with each [n] a citation button, as nodes. */
function withCitations(text) {
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(CITATION)) {
    if (match.index > last) nodes.push(text.slice(last, match.index));
    nodes.push(citationLink(Number(match[1])));
    last = match.index + match[0].length;
  }
  if (last < text.length) nodes.push(text.slice(last));
  return nodes;
}

/** Render `text` into `node`: citations as links, unsupported sentences marked. */
function renderAnswer(node, text, unsupported = []) {
  const parts = [];
  let last = 0;
  for (const [start, end] of unsupportedRanges(text, unsupported)) {
    if (start < last) continue;
    parts.push(...withCitations(text.slice(last, start)));
    parts.push(
      el(
        "span",
        { className: "unsupported-claim", title: "The cited passage does not back this sentence" },
        ...withCitations(text.slice(start, end)),
        el("span", { className: "flag" }, " (not supported by the cited passage)"),
      ),
    );
    last = end;
  }
  parts.push(...withCitations(text.slice(last)));
  node.replaceChildren(...parts);
}

/**
 * Show a finished answer as citeline checked it: its citations (a `complete` event's, or a stored
 * answer's), the sentences its passages do not back, and whether the evidence was missing. A live
 * answer and one reopened from the server go through here alike, so they look alike.
 */
function showChecked(message, body, answer) {
  for (const citation of answer.citations) {
    const known = state.citations.get(citation.number);
    state.citations.set(citation.number, known?.chunk_id === citation.chunk_id ? { ...known, ...citation } : citation);
  }
  const unsupported = answer.unsupported ?? [];
  renderAnswer(body, answer.answer, unsupported);
  if (answer.evidence_missing) {
    message.append(
      el("p", { className: "not-in-evidence", role: "note" },
        "Not in the evidence: the documents searched do not answer this question."),
    );
  } else if (unsupported.length) {
    message.append(
      el("p", { className: "unsupported-note" },
        `${unsupported.length} sentence${unsupported.length > 1 ? "s are" : " is"} not supported by the cited passages (marked).`),
    );
  }
}

/**
 * Say what a follow-up was searched as, in its answer between the heading and the text: it is how
 * that answer was found, not a note on the question before.
 */
function showSearched(body, query) {
  body.before(el("p", { className: "rewrite" }, `Searched for: ${query}`));
}

function addMessage(role, text) {
  const body = el("div", { className: "message-text" });
  const message = el("article", { className: `message ${role}` }, el("h3", {}, role === "user" ? "You" : "citeline"), body);
  if (role === "user") body.textContent = text;
  else renderAnswer(body, text);
  $("messages").append(message);
  message.scrollIntoView({ block: "end" });
  return { message, body };
}

// -- keeping an answer in view -------------------------------------------------------------------

/** Whether the conversation scrolls in its own box; at phone width the box grows and the page scrolls. */
const ownScroll = (box) => box.scrollHeight > box.clientHeight + 1;

/** The part of the window the conversation is seen in: its own box, or the window (phone width). */
function conversationView() {
  const box = $("messages");
  const seen = box.getBoundingClientRect();
  const top = ownScroll(box) ? Math.max(seen.top, 0) : 0;
  return { top, bottom: Math.min(seen.bottom, window.innerHeight) };
}

/**
 * Scroll down so the end of `message` is on screen, but no further than its question reaching the top
 * of the view: an answer taller than the view is then read from its beginning, at the reader's pace.
 * The conversation's own box scrolls, or the window where the box grows with it (at phone width).
 */
function bringIntoView(message) {
  const view = conversationView();
  const question = message.previousElementSibling ?? message;
  const room = question.getBoundingClientRect().top - view.top - 8;
  const by = Math.min(message.getBoundingClientRect().bottom - view.bottom, room);
  if (by <= 0) return;
  const box = $("messages");
  if (ownScroll(box)) box.scrollTop += by;
  else window.scrollBy(0, by);
}

/**
 * A function that runs a change to the answer `message` (just added, in view) and keeps its end in
 * view, until the reader scrolls up: then they read what they chose, and the answer is not followed.
 */
function follower(message) {
  const scrolled = () => ({ box: $("messages").scrollTop, page: window.scrollY });
  let left = scrolled();
  let on = true;
  return (change) => {
    const now = scrolled();
    if (now.box < left.box - 1 || now.page < left.page - 1) on = false;
    change();
    if (!on) return;
    bringIntoView(message);
    left = scrolled();
  };
}

// -- asking ---------------------------------------------------------------------------------------

function selectedScopes() {
  const value = $("scope").value;
  return value ? [value] : undefined;
}

/**
 * Say how an answer ended without being complete (failed, stopped, cut off), under it and in view: a
 * tall question would otherwise leave the reason below the fold, as if nothing happened.
 */
function endNote(message, className, words) {
  const note = el("p", { className, ...(className === "error" ? { role: "alert" } : {}) }, words);
  message.append(note);
  note.scrollIntoView({ block: "nearest" });
}

/** The question back in its box to send again, unless something else was typed there meanwhile. */
function giveBack(question) {
  if (!$("question").value.trim()) $("question").value = question;
}

function setBusy(busy) {
  // A button disabled while it has the focus drops it to the top of the page: a keyboard user who
  // pressed Ask is on Stop, and after Stop (or the answer's end) on the question box.
  const from = document.activeElement;
  $("ask").disabled = busy;
  $("stop").disabled = !busy;
  $("question").readOnly = busy;
  if (busy && from === $("ask")) $("stop").focus();
  else if (!busy && from === $("stop")) $("question").focus();
}

/**
 * The answer being written in the conversation on screen, if any. Each ask belongs to the conversation
 * it was asked in: one left for another goes on (the server stores it once complete) and is drawn again
 * when its conversation is opened again before it ends; the Ask and Stop buttons are the screen's.
 */
function askOnScreen() {
  for (const asking of state.asks) if (asking.screen === state.screen) return asking;
  return null;
}

/** Keep the questions on their way in conversations other than the one on screen, for a reload. */
function keepLeft() {
  const left = {};
  for (const { asked, screen, question, turn, before } of state.asks) {
    if (asked && screen !== state.screen) left[asked] = { question, turn, before };
  }
  if (Object.keys(left).length) sessionStorage.setItem(LEFT_STORAGE, JSON.stringify(left));
  else sessionStorage.removeItem(LEFT_STORAGE);
}

/** Draw `asking`'s question and its answer so far into the conversation on screen, and follow it. */
function drawAsk(asking) {
  asking.screen = state.screen;
  keepLeft();
  for (const [number, citation] of asking.citations) {
    if (!state.citations.has(number)) state.citations.set(number, citation);
  }
  addMessage("user", asking.question);
  const { message, body } = addMessage("assistant", "");
  message.setAttribute("aria-busy", "true");
  if (asking.searched) showSearched(body, asking.searched);
  renderAnswer(body, asking.text);
  Object.assign(asking, { message, body, following: follower(message) });
  setBusy(true);
  say($("chat-status"), asking.status);
  sessionStorage.setItem(ASKING_STORAGE, asking.question);
}

/**
 * After a Stop: on a slow network the server may have finished and stored the answer before the page
 * had read it all. Then the conversation is shown as stored, and said so, rather than "Stopped." over
 * an answer the conversation holds (and the next follow-up builds on).
 */
async function shownIfStored(asking) {
  try {
    const conversation = await api(`/conversations/${encodeURIComponent(asking.asked)}`);
    const stored = conversation.messages.filter((message) => message.role === "user").length;
    if (stored < asking.turn || asking.screen !== state.screen || askOnScreen()) return;
    if (!(await openConversation(asking.asked, { quiet: true }))) return;
    // Answered after all: its question, given back at the Stop, is not one to ask again.
    if ($("question").value === asking.question) $("question").value = "";
    say($("chat-status"), "Stopped too late: the server had finished and stored the answer, shown here whole.");
  } catch {
    // The stopped answer stays as it is.
  }
}

async function ask(question) {
  const status = $("chat-status");
  state.opening += 1; // asked in the conversation on screen: one still being opened is not shown over it
  const asking = {
    question,
    asked: state.conversationId, // the conversation asked in; a new one's id comes with `start`
    turn: undefined,
    before: $("messages").querySelectorAll(".message.user").length,
    controller: new AbortController(),
    // What came so far, kept off screen too: the answer is drawn again if its conversation is reopened.
    text: "",
    searched: null,
    status: "Searching the documents…",
    failed: null, // how it ended without an answer, in words
    citations: new Map(state.citations),
    screen: 0,
    startedAt: null, // when the server started its turn (the `start` event)
    message: null,
    body: null,
    following: null,
  };
  state.asks.add(asking);
  drawAsk(asking);
  // Another conversation opened (or a new one begun) while this answer comes: the answer goes on, and is
  // stored, but writes nothing into the one on screen (its citation numbers, its id, its status).
  const onScreen = () => asking.screen === state.screen;
  let ended = false; // a complete or error event came: else the stream was cut off
  const request = { question, persona: $("persona").value, scopes: selectedScopes() };
  if (asking.asked) request.conversation_id = asking.asked;
  try {
    await streamAnswer(request, asking.controller.signal, (name, data) => {
      if (name === "complete" || name === "error") ended = true;
      if (name === "start") {
        asking.asked = data.conversation_id;
        asking.turn = data.turn;
        asking.startedAt = new Date().toISOString();
        keepLeft();
        if (onScreen()) setConversation(data.conversation_id);
        drawConversations(); // a new conversation is listed now, not once its answer has come
      } else if (name === "rewrite" && data.rewritten) {
        asking.searched = data.query;
      } else if (name === "evidence") {
        asking.status = `Answering from ${data.passages.length} passages…`;
      } else if (name === "token") {
        asking.text += data.text;
      } else if (name === "error") {
        const note = requestNote(data.status ?? 500, data.request_id).replace(/^, /, "");
        asking.failed = `The answer failed: ${data.message}${note ? ` (${note})` : ""}`;
      } else if (name === "citation") {
        // The passage comes the first time the conversation (as stored) cites it, and the checked
        // citation (excerpt, support score) with `complete`. A passage sent replaces what the page
        // knew under its number: that was an answer's not stored (stopped, cut off), not this one's.
        const passage = data.passage ?? asking.citations.get(data.number);
        if (passage) asking.citations.set(data.number, { ...passage, number: data.number, stance: data.stance });
      }
      if (!onScreen()) return;
      const { message, body, following } = asking;
      if (name === "start") {
        // The question is kept in its box until the server has taken it: a refused or failed ask
        // (an error status, a key refused, no network) leaves it there to send again.
        if ($("question").value.trim() === question) $("question").value = "";
      } else if (name === "rewrite" && data.rewritten) {
        following(() => showSearched(body, data.query));
      } else if (name === "evidence") {
        say(status, asking.status);
        for (const passage of data.passages) prefetchDocument(passage.document_id, passage.version);
      } else if (name === "token") {
        following(() => renderAnswer(body, asking.text));
      } else if (name === "citation") {
        const citation = asking.citations.get(data.number);
        if (citation) {
          state.citations.set(data.number, citation);
          prefetchDocument(citation.document_id, citation.version);
        }
        following(() => renderAnswer(body, asking.text));
      } else if (name === "complete") {
        following(() => showChecked(message, body, data));
        say(status, "");
      } else if (name === "error") {
        endNote(message, "error", asking.failed);
        giveBack(question);
        say(status, "");
      }
    });
    // The connection closed mid-answer (a proxy's timeout, a server restart): what came is no answer.
    if (!ended) throw new CutOff();
  } catch (error) {
    checkRefused(error); // the stream's own request: a revoked key signs the page out
    let failed = null;
    if (error?.name === "AbortError") {
      if (onScreen()) {
        // The server stores no turn it did not finish: the question would be lost with it.
        endNote(asking.message, "stopped", "Stopped.");
        giveBack(question);
      }
      if (onScreen() && asking.turn) shownIfStored(asking);
    } else if (!(error instanceof CutOff)) {
      failed = `The answer failed: ${describeError(error)}`;
    } else if (!ended) { // after the complete or error event, what broke was only the connection's end
      failed = error.message;
    }
    if (failed) {
      asking.failed = failed;
      if (onScreen()) {
        endNote(asking.message, "error", failed);
        giveBack(question);
      }
    }
    if (onScreen()) say(status, "");
  } finally {
    state.asks.delete(asking);
    keepLeft();
    asking.message.removeAttribute("aria-busy");
    if (onScreen()) {
      sessionStorage.removeItem(ASKING_STORAGE);
      setBusy(false);
    }
    refreshConversations();
    if (!onScreen() && asking.failed) {
      // Failed in a conversation left: said now, and again with its question given back there.
      if (asking.asked) state.unanswered.set(asking.asked, asking);
      if (!askOnScreen()) {
        say(status, `Not answered in a conversation you left: "${asking.question}": ${asking.failed}`, "error");
      }
    }
    // Its conversation opened again meanwhile, from the server, with this turn stored before its
    // answer had all come here (or failed): read it again.
    if (!onScreen() && asking.asked && state.conversationId === asking.asked && !askOnScreen()) {
      openConversation(asking.asked, { quiet: true });
    }
  }
}

// -- the citation panel ---------------------------------------------------------------------------

/** How long an answer about a document's current version is reused (ms): a re-ingest may replace it. */
const CURRENT_VERSION_REUSE_MS = 5000;

/**
 * GET /documents/{id}, of `version` when given (a citation's: kept, a version never changes), else the
 * current version (reused for a few seconds only, so a version swapped in meanwhile shows).
 */
function prefetchDocument(id, version) {
  if (version === undefined) {
    const held = state.currentDocuments.get(id);
    if (held && Date.now() - held.at < CURRENT_VERSION_REUSE_MS) return held.request;
    const request = api(`/documents/${encodeURIComponent(id)}`);
    request.catch(() => state.currentDocuments.delete(id));
    state.currentDocuments.set(id, { at: Date.now(), request });
    return request;
  }
  const key = `${id}@${version}`;
  if (!state.documents.has(key)) {
    const request = api(`/documents/${encodeURIComponent(id)}?version=${encodeURIComponent(version)}`);
    request.catch(() => state.documents.delete(key));
    state.documents.set(key, request);
  }
  return state.documents.get(key);
}

/** The routes of a citation's document: of the version it cited, or (`current`) of the current one. */
function documentUrls(citation, current = false) {
  const id = encodeURIComponent(citation.document_id);
  const query = current ? "" : `?version=${encodeURIComponent(citation.version)}`;
  return {
    fileUrl: `/documents/${id}/file${query}`,
    pageUrl: `/documents/${id}/pages/${citation.page}${query}`,
  };
}

function fact(term, value) {
  return [el("dt", {}, term), el("dd", {}, value)];
}

async function showCitation(citation) {
  const { number } = citation;
  state.current = citation;
  const panel = $("citation-panel");
  panel.hidden = false;
  $("citation-title").textContent = `Citation [${number}]`;
  $("viewer").hidden = true;
  $("citation-version").hidden = true;
  if (citation.available === false) {
    $("citation-facts").replaceChildren();
    $("citation-support").className = "support";
    $("citation-support").textContent =
      "This passage is no longer available: its document was deleted, or this key may not see it.";
    $("citation-passage").replaceChildren();
    $("open-page").hidden = true;
    panel.focus();
    return;
  }
  $("open-page").hidden = false;
  $("citation-facts").replaceChildren(
    ...fact("Document", citation.title || citation.document_name),
    ...(citation.title ? fact("File", citation.document_name) : []),
    ...fact("Version", String(citation.version)),
    ...(citation.rows
      ? fact(citation.rows[0] === citation.rows[1] ? "Row" : "Rows", place(citation).replace(/^rows? /, ""))
      : fact("Page", String(citation.page))),
    ...(citation.section ? fact("Section", citation.section) : []),
    // The same passage, word for word, in other documents: search shows it once (also_in).
    ...(citation.also_in?.length
      ? fact("Also in", citation.also_in.map((copy) => `${copy.document_name}, page ${copy.page}`).join("; "))
      : []),
    ...fact(
      "Support score",
      citation.score === undefined ? (citation.stored ? "not recorded" : "being checked") : citation.score.toFixed(2),
    ),
    ...(citation.stance ? fact("Stance", citation.stance) : []),
  );
  const support = $("citation-support");
  if (citation.supported === undefined) {
    support.className = "support";
    support.textContent = citation.stored
      ? "This answer was stored before citeline kept its checks."
      : "The answer is still being written; the citation is checked at its end.";
  } else {
    support.className = citation.supported ? "support supported" : "support unsupported";
    support.textContent = citation.supported
      ? "The passage supports the sentences citing it."
      : "Not supported: the passage does not back the sentences citing it.";
  }
  if (citation.stance === "contradicts") support.textContent += " The passage contradicts the sentence citing it.";
  if (citation.attributed) support.textContent += " (Cited by citeline, not by the model.)";
  const passage = $("citation-passage");
  passage.replaceChildren(citation.excerpt ?? citation.text ?? "");
  panel.focus();
  showVersionNote(citation);
  // The whole passage, with the cited sentence marked, from the page text the offsets index.
  try {
    const page = await api(documentUrls(citation).pageUrl);
    if (state.current !== citation) return;
    const text = page.text;
    const { start, end, excerpt_start: xs, excerpt_end: xe } = citation;
    if (xs !== undefined && xs >= start && xe <= end) {
      passage.replaceChildren(text.slice(start, xs), el("mark", {}, text.slice(xs, xe)), text.slice(xe, end));
    } else {
      passage.replaceChildren(text.slice(start, end));
    }
  } catch {
    // The excerpt already shown is enough; the viewer reports its own errors.
  }
}

/**
 * Say so when the document has a newer version than the one cited: the citation still opens the text
 * and page it cited, and "Open the current version" opens the newer one at the same page.
 */
async function showVersionNote(citation) {
  // Asked each time: the version a reopened conversation recorded may have been replaced since.
  let current;
  try {
    current = (await prefetchDocument(citation.document_id)).version;
  } catch {
    current = citation.current_version; // gone (null), or what the conversation last knew
    if (current === undefined) return;
  }
  if (state.current !== citation || current === null || current === citation.version) return;
  $("citation-version-text").textContent =
    `This passage is from version ${citation.version}, as it was cited. The document now has a newer version (${current}).`;
  $("citation-version").hidden = false;
}

/**
 * The cited span as the page holds it, for the viewer to find: the excerpt reads a table's row under
 * its headers ("Model: HX-4000; Max pressure (bar): 16."), words the stored row "| HX-4000 | 16 |" does
 * not have, so the viewer looked for the headers' words and marked them.
 */
function citedText(citation) {
  const { text, start, excerpt_start: xs, excerpt_end: xe } = citation;
  if (typeof text === "string" && xs !== undefined && xs >= start && xe - start <= text.length) {
    return text.slice(xs - start, xe - start);
  }
  return citation.excerpt ?? text;
}

async function openAtPage(current = false) {
  const citation = state.current;
  if (!citation) return;
  const box = $("viewer");
  box.hidden = false;
  state.viewer ??= new CitationViewer(box, { headers: authHeaders() });
  let contentType = "text/plain";
  try {
    const shown = await prefetchDocument(citation.document_id, current ? undefined : citation.version);
    contentType = shown.content_type || contentType;
  } catch (error) {
    box.replaceChildren(el("p", { className: "error", role: "alert" }, `Could not open the document: ${describeError(error)}`));
    return;
  }
  try {
    // The current version may have moved the passage: the viewer then looks for its words on the page.
    await state.viewer.open({
      ...documentUrls(citation, current),
      contentType,
      page: citation.page,
      // The cited sentence once the answer is checked; until then the whole passage.
      start: citation.excerpt_start ?? citation.start,
      end: citation.excerpt_end ?? citation.end,
      text: citedText(citation),
    });
  } catch {
    // The viewer has written the failure in words inside its box.
  }
}

// -- conversations --------------------------------------------------------------------------------

/**
 * An empty conversation on screen. `keepQuestion` on signing out (or a key refused): the question in
 * its box is there to send again once signed in.
 */
function newConversation({ keepQuestion = false } = {}) {
  state.opening += 1;
  state.screen += 1;
  // A question still being answered belongs to the conversation left: a reload must not give it
  // back into this one, where it would be asked, nor may its box, where Ask would ask it here.
  sessionStorage.removeItem(ASKING_STORAGE);
  for (const asking of state.asks) {
    if (!keepQuestion && $("question").value.trim() === asking.question) $("question").value = "";
  }
  keepLeft();
  setBusy(false);
  say($("chat-status"), ""); // "Searching the documents…" was the conversation left's
  setConversation(null);
  state.citations.clear();
  state.currentDocuments.clear(); // a document may have a newer version since it was fetched
  $("messages").replaceChildren();
  $("citation-panel").hidden = true;
  markCurrentConversation();
  $("question").focus();
}

function markCurrentConversation() {
  for (const item of $("conversation-list").children) {
    item.classList.toggle("current", item.dataset.id === state.conversationId);
  }
}

function conversationItem(conversation) {
  return el(
    "li",
    { dataset: { id: conversation.id } },
    // The narrow column cuts a long title: its tooltip shows it whole.
    el("button", {
      type: "button",
      className: "continue",
      title: conversation.title || "(untitled)",
      onclick: () => openConversation(conversation.id),
    }, conversation.title || "(untitled)"),
    el("span", { className: "when" }, formatDate(conversation.updated_at)),
    el("button", {
      type: "button",
      className: "delete",
      "aria-label": `Delete the conversation ${conversation.title || ""}`,
      onclick: () => deleteConversation(conversation),
    }, "Delete"),
  );
}

/**
 * The conversations begun here whose first answer is still on its way, newest first: the server lists
 * a conversation once it holds a turn, which is when that answer ends. Titled by their question, as
 * the server will title them.
 */
function conversationsStarted(listed) {
  const ids = new Set(listed.map((conversation) => conversation.id));
  return [...state.asks]
    .filter((asking) => asking.turn === 1 && !ids.has(asking.asked))
    .sort((a, b) => b.startedAt.localeCompare(a.startedAt))
    .map((asking) => ({ id: asking.asked, title: asking.question.split(/\s+/).join(" "), updated_at: asking.startedAt }));
}

/** Draw the list the server gave last, under the conversations started here that it does not list yet. */
function drawConversations() {
  const listed = state.conversations;
  if (listed === null) return; // not read (or its failure is said): the next reading draws them all
  const shown = [...conversationsStarted(listed), ...listed];
  const list = $("conversation-list");
  list.replaceChildren(...shown.map(conversationItem));
  if (!shown.length) list.replaceChildren(el("li", { className: "empty" }, "None yet."));
  if (listed.length >= CONVERSATIONS_LISTED) {
    list.append(el("li", { className: "empty" }, `The ${CONVERSATIONS_LISTED} most recent are listed; delete older ones to see the rest.`));
  }
  markCurrentConversation();
}

async function refreshConversations() {
  const listing = ++state.listing;
  try {
    const { conversations } = await api(`/conversations?limit=${CONVERSATIONS_LISTED}`);
    // A list asked for before a sign-out (another key's) or before a newer one is not drawn.
    if (listing !== state.listing) return;
    state.conversations = conversations;
    drawConversations();
  } catch (error) {
    if (listing !== state.listing) return;
    state.conversations = null;
    $("conversation-list").replaceChildren(
      el("li", { className: "error" }, `Could not list conversations: ${describeError(error)}`));
  }
}

async function openConversation(id, { quiet = false } = {}) {
  const opening = ++state.opening;
  try {
    const conversation = await api(`/conversations/${encodeURIComponent(id)}`);
    if (opening !== state.opening) return; // another one was picked, or a new one begun, meanwhile
    newConversation();
    setConversation(conversation.id);
    $("persona").value = conversation.persona;
    let searched = null; // the question before the answer, when it was searched rewritten
    for (const stored of conversation.messages) {
      if (stored.role === "user") {
        addMessage("user", stored.content);
        searched = stored.standalone_query && stored.standalone_query !== stored.content ? stored.standalone_query : null;
      } else {
        const { message, body } = addMessage("assistant", "");
        if (searched) showSearched(body, searched);
        // `stored` tells an answer kept before its checks were (no support score) from one being written.
        const citations = stored.citations.map((citation) => ({ ...citation, stored: true }));
        showChecked(message, body, { ...stored, answer: stored.content, citations });
      }
    }
    say($("chat-status"), "Ask a follow-up to continue the conversation (citation numbers continue).");
    const asked = conversation.messages.filter((stored) => stored.role === "user").length;
    const failed = state.unanswered.get(conversation.id);
    state.unanswered.delete(conversation.id);
    if (failed && asked < (failed.turn ?? failed.before + 1)) {
      // Its answer failed while another conversation was on screen: said here, as it would have been.
      addMessage("user", failed.question);
      const { message, body } = addMessage("assistant", "");
      renderAnswer(body, failed.text);
      endNote(message, "error", failed.failed);
      giveBack(failed.question);
    }
    // Its answer still on its way (asked before another conversation was opened) and not stored yet:
    // drawn as it stands, and written on as it comes.
    for (const asking of state.asks) {
      if (asking.asked === conversation.id && asked < (asking.turn ?? asking.before + 1)) {
        drawAsk(asking);
        if (!asking.turn) giveBack(asking.question); // not taken by the server yet: kept in its box
        break;
      }
    }
    // Each message was brought into view as it was added, before its answer was drawn.
    const last = $("messages").lastElementChild;
    if (last) bringIntoView(last);
    markCurrentConversation();
    return conversation;
  } catch (error) {
    if (opening !== state.opening) return;
    if (quiet) setConversation(null); // the one open before a reload: deleted or expired since
    else say($("chat-status"), `Could not open the conversation: ${describeError(error)}`, "error");
  }
}

async function deleteConversation(conversation) {
  if (!confirm(`Delete the conversation "${conversation.title || "untitled"}"?`)) return;
  try {
    await api(`/conversations/${encodeURIComponent(conversation.id)}`, { method: "DELETE" });
    // Its answer still on its way is for no one now: stopped, and not said as unanswered.
    for (const asking of state.asks) if (asking.asked === conversation.id) asking.controller.abort();
    state.unanswered.delete(conversation.id);
    if (state.conversationId === conversation.id) newConversation();
    refreshConversations();
  } catch (error) {
    say($("chat-status"), `Could not delete the conversation: ${describeError(error)}`, "error");
  }
}

// -- start ----------------------------------------------------------------------------------------

/**
 * Forget what the signed-out key was shown (its conversations, scopes, the citation open, the cited
 * documents): hidden is not gone, and the next key signed in in this tab may see other scopes.
 */
function forgetShown() {
  state.listing += 1;
  state.conversations = null;
  $("conversation-list").replaceChildren();
  $("scope").replaceChildren();
  sessionStorage.removeItem(SCOPE_STORAGE);
  sessionStorage.removeItem(ASKING_STORAGE);
  state.current = null;
  $("citation-title").textContent = "Citation";
  for (const id of ["citation-facts", "citation-passage", "citation-support", "citation-version-text"]) {
    $(id).replaceChildren();
  }
  state.viewer?.close();
  state.viewer = null;
  $("viewer").replaceChildren();
  state.documents.clear();
  state.currentDocuments.clear();
  state.unanswered.clear();
  sessionStorage.removeItem(LEFT_STORAGE);
  say($("chat-status"), "");
}

function showSignIn() {
  forgetShown();
  $("chat").hidden = true;
  $("chat-controls").hidden = true;
  $("sign-in").hidden = false;
  $("key").focus();
}

function start(me) {
  const scope = $("scope");
  scope.replaceChildren(
    el("option", { value: "" }, me.all_scopes ? "All scopes" : "All my scopes"),
    ...me.scopes.map((name) => el("option", { value: name }, name)),
  );
  const kept = sessionStorage.getItem(SCOPE_STORAGE);
  if (kept && me.scopes.includes(kept)) scope.value = kept;
  $("admin-link").hidden = me.role !== "admin";
  $("sign-in").hidden = true;
  $("chat").hidden = false;
  $("chat-controls").hidden = false;
  state.viewer?.close();
  state.viewer = null;
  refreshConversations();
  $("question").focus();
  // A reload mid-conversation reopens it, and gives back a question whose answer it cut short.
  const asking = sessionStorage.getItem(ASKING_STORAGE);
  sessionStorage.removeItem(ASKING_STORAGE);
  let left = {};
  try {
    left = JSON.parse(sessionStorage.getItem(LEFT_STORAGE) ?? "{}") ?? {};
  } catch {
    // Not this page's writing: nothing to give back.
  }
  sessionStorage.removeItem(LEFT_STORAGE);
  for (const [id, { question, turn, before }] of Object.entries(left)) {
    const failed = "Not answered: the page was reloaded before its answer was complete. Ask it again.";
    state.unanswered.set(id, { question, turn, before, text: "", failed });
  }
  const open = sessionStorage.getItem(CONVERSATION_STORAGE);
  const opened = open ? openConversation(open, { quiet: true }) : Promise.resolve(undefined);
  if (asking) opened.then((conversation) => giveBackUnanswered(asking, conversation));
}

/**
 * After a reload mid-answer: the question back in its box to ask again, unless the server finished
 * and stored its answer all the same (then the reopened conversation shows it).
 */
function giveBackUnanswered(question, conversation) {
  const asked = conversation?.messages.filter((stored) => stored.role === "user").at(-1);
  if (asked?.content === question) return;
  giveBack(question);
  say($("chat-status"), "Your last question was not answered: the page was reloaded before its answer was complete. Ask it again.");
}

$("ask-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || askOnScreen()) return;
  ask(question);
});
$("question").addEventListener("keydown", (event) => {
  // Enter asks, Shift+Enter makes a new line.
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("ask-form").requestSubmit();
  }
});
$("scope").addEventListener("change", () => {
  if ($("scope").value) sessionStorage.setItem(SCOPE_STORAGE, $("scope").value);
  else sessionStorage.removeItem(SCOPE_STORAGE);
});
// Stop stops the answer of the conversation on screen, never one left for another conversation.
$("stop").addEventListener("click", () => askOnScreen()?.controller.abort());
$("new-conversation").addEventListener("click", () => newConversation());
$("open-page").addEventListener("click", () => openAtPage());
$("open-current").addEventListener("click", () => openAtPage(true));
$("close-panel").addEventListener("click", () => {
  $("citation-panel").hidden = true;
  document.querySelector(`.cite[data-number="${state.current?.number}"]`)?.focus();
});
closeOnEscape($("citation-panel"), () => $("close-panel").click());
function stopAll() {
  for (const asking of state.asks) asking.controller.abort();
}

$("sign-out").addEventListener("click", () => {
  stopAll();
  forgetKey();
  newConversation({ keepQuestion: true });
  showSignIn();
});
setUpSignIn($("sign-in-form"), $("sign-in-status"), start);
onKeyRefused((error) => {
  stopAll();
  newConversation({ keepQuestion: true });
  showSignIn();
  say($("sign-in-status"), `Signed out: ${describeError(error)}. Sign in again with a valid key.`, "error");
});

const me = await whoAmI();
if (me) start(me);
else showSignIn();
