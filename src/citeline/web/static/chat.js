// The chat page: sign in with a key, ask, read the answer as it streams with each [n] a link to its
// passage, open the passage at its page in the citation viewer. Every text from the server (answers,
// passages, document names) is inserted as text, never as HTML.

import {
  api,
  authHeaders,
  describeError,
  el,
  forgetKey,
  formatDate,
  responseError,
  say,
  setUpSignIn,
  whoAmI,
} from "./common.js";
import { CitationViewer } from "./viewer.js";

const $ = (id) => document.getElementById(id);
const CITATION = /\[(\d+)\]/g;

const state = {
  conversationId: null,
  // Citation numbers continue through a conversation, so one map serves all its answers.
  citations: new Map(),
  documents: new Map(), // document id -> promise of GET /documents/{id}
  controller: null,
  current: null, // the citation shown in the panel
  viewer: null,
};

// -- streaming ------------------------------------------------------------------------------------

/**
 * POST /chat/stream and call `onEvent(name, data)` for each server-sent event. EventSource cannot send
 * an Authorization header, so the stream is read with fetch: events are separated by a blank line,
 * comment lines (the heartbeat) start with ":".
 */
async function streamAnswer(body, signal, onEvent) {
  const response = await fetch("/chat/stream", {
    method: "POST",
    headers: { ...authHeaders(), "Content-Type": "application/json", Accept: "text/event-stream" },
    body: JSON.stringify(body),
    signal,
  });
  if (!response.ok) throw await responseError(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
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
      if (data.length) onEvent(name, JSON.parse(data.join("\n")));
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

function citationLink(number) {
  const citation = state.citations.get(number);
  const label = `[${number}]`;
  if (!citation) return el("span", { className: "cite pending" }, label);
  const unsupported = citation.supported === false;
  return el(
    "button",
    {
      type: "button",
      className: unsupported ? "cite unsupported" : "cite",
      title: `${citation.document_name}, page ${citation.page}${unsupported ? " (not supported)" : ""}`,
      "aria-label": `Citation ${number}: ${citation.document_name}, page ${citation.page}${
        unsupported ? ", not supported by the passage" : ""
      }`,
      dataset: { number: String(number) },
      onclick: () => showCitation(number),
    },
    label,
  );
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

function addMessage(role, text) {
  const body = el("div", { className: "message-text" });
  const message = el("article", { className: `message ${role}` }, el("h3", {}, role === "user" ? "You" : "citeline"), body);
  if (role === "user") body.textContent = text;
  else renderAnswer(body, text);
  $("messages").append(message);
  message.scrollIntoView({ block: "end" });
  return { message, body };
}

// -- asking ---------------------------------------------------------------------------------------

function selectedScopes() {
  const value = $("scope").value;
  return value ? [value] : undefined;
}

function setBusy(busy) {
  $("ask").disabled = busy;
  $("stop").disabled = !busy;
  $("question").readOnly = busy;
}

async function ask(question) {
  const status = $("chat-status");
  addMessage("user", question);
  const { message, body } = addMessage("assistant", "");
  message.setAttribute("aria-busy", "true");
  let text = "";
  let unsupported = [];
  state.controller = new AbortController();
  setBusy(true);
  say(status, "Searching the documents…");
  const request = { question, persona: $("persona").value, scopes: selectedScopes() };
  if (state.conversationId) request.conversation_id = state.conversationId;
  try {
    await streamAnswer(request, state.controller.signal, (name, data) => {
      if (name === "start") {
        state.conversationId = data.conversation_id;
      } else if (name === "rewrite" && data.rewritten) {
        message.prepend(el("p", { className: "rewrite" }, `Searched for: ${data.query}`));
      } else if (name === "evidence") {
        say(status, `Answering from ${data.passages.length} passages…`);
        for (const passage of data.passages) prefetchDocument(passage.document_id);
      } else if (name === "token") {
        text += data.text;
        renderAnswer(body, text);
      } else if (name === "citation") {
        // The passage comes the first time the conversation cites it; the checked citation (excerpt,
        // support score) comes with `complete`.
        const known = state.citations.get(data.number);
        if (data.passage || known) {
          state.citations.set(data.number, { ...known, ...data.passage, number: data.number, stance: data.stance });
          prefetchDocument((data.passage ?? known).document_id);
        }
        renderAnswer(body, text);
      } else if (name === "complete") {
        for (const citation of data.citations) {
          state.citations.set(citation.number, { ...state.citations.get(citation.number), ...citation });
        }
        text = data.answer;
        unsupported = data.unsupported ?? [];
        renderAnswer(body, text, unsupported);
        if (data.evidence_missing) {
          message.append(
            el("p", { className: "not-in-evidence", role: "note" },
              "Not in the evidence: the documents this key can see do not answer this question."),
          );
        } else if (unsupported.length) {
          message.append(
            el("p", { className: "unsupported-note" },
              `${unsupported.length} sentence${unsupported.length > 1 ? "s are" : " is"} not supported by the cited passages (marked).`),
          );
        }
        say(status, "");
      } else if (name === "error") {
        message.append(el("p", { className: "error", role: "alert" }, `The answer failed: ${data.message}`));
        say(status, "");
      }
    });
  } catch (error) {
    if (error?.name === "AbortError") {
      message.append(el("p", { className: "stopped" }, "Stopped."));
      say(status, "");
    } else {
      message.append(el("p", { className: "error", role: "alert" }, `The answer failed: ${describeError(error)}`));
      say(status, "");
    }
  } finally {
    message.removeAttribute("aria-busy");
    state.controller = null;
    setBusy(false);
    refreshConversations();
  }
}

// -- the citation panel ---------------------------------------------------------------------------

function prefetchDocument(id) {
  if (!state.documents.has(id)) {
    const request = api(`/documents/${encodeURIComponent(id)}`);
    request.catch(() => state.documents.delete(id));
    state.documents.set(id, request);
  }
  return state.documents.get(id);
}

function fact(term, value) {
  return [el("dt", {}, term), el("dd", {}, value)];
}

async function showCitation(number) {
  const citation = state.citations.get(number);
  if (!citation) return;
  state.current = citation;
  const panel = $("citation-panel");
  panel.hidden = false;
  $("citation-title").textContent = `Citation [${number}]`;
  $("citation-facts").replaceChildren(
    ...fact("Document", citation.title || citation.document_name),
    ...(citation.title ? fact("File", citation.document_name) : []),
    ...fact("Version", String(citation.version)),
    ...fact("Page", String(citation.page)),
    ...(citation.section ? fact("Section", citation.section) : []),
    ...fact("Support score", citation.score === undefined ? "being checked" : citation.score.toFixed(2)),
    ...(citation.stance ? fact("Stance", citation.stance) : []),
  );
  const support = $("citation-support");
  if (citation.supported === undefined) {
    support.className = "support";
    support.textContent = "The answer is still being written; the citation is checked at its end.";
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
  $("viewer").hidden = true;
  panel.focus();
  // The whole passage, with the cited sentence marked, from the page text the offsets index.
  try {
    const page = await api(`/documents/${encodeURIComponent(citation.document_id)}/pages/${citation.page}`);
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

async function openAtPage() {
  const citation = state.current;
  if (!citation) return;
  const box = $("viewer");
  box.hidden = false;
  state.viewer ??= new CitationViewer(box, { headers: authHeaders() });
  const id = encodeURIComponent(citation.document_id);
  let contentType = "text/plain";
  try {
    contentType = (await prefetchDocument(citation.document_id)).content_type || contentType;
  } catch (error) {
    box.replaceChildren(el("p", { className: "error", role: "alert" }, `Could not open the document: ${describeError(error)}`));
    return;
  }
  try {
    await state.viewer.open({
      fileUrl: `/documents/${id}/file`,
      pageUrl: `/documents/${id}/pages/${citation.page}`,
      contentType,
      page: citation.page,
      // The cited sentence once the answer is checked; until then the whole passage.
      start: citation.excerpt_start ?? citation.start,
      end: citation.excerpt_end ?? citation.end,
      text: citation.excerpt ?? citation.text,
    });
  } catch {
    // The viewer has written the failure in words inside its box.
  }
}

// -- conversations --------------------------------------------------------------------------------

function newConversation() {
  state.conversationId = null;
  state.citations.clear();
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

async function refreshConversations() {
  const list = $("conversation-list");
  try {
    const { conversations } = await api("/conversations");
    list.replaceChildren(
      ...conversations.map((conversation) =>
        el(
          "li",
          { dataset: { id: conversation.id } },
          el("button", { type: "button", className: "continue", onclick: () => openConversation(conversation.id) },
            conversation.title || "(untitled)"),
          el("span", { className: "when" }, formatDate(conversation.updated_at)),
          el("button", {
            type: "button",
            className: "delete",
            "aria-label": `Delete the conversation ${conversation.title || ""}`,
            onclick: () => deleteConversation(conversation),
          }, "Delete"),
        ),
      ),
    );
    if (!conversations.length) list.replaceChildren(el("li", { className: "empty" }, "None yet."));
    markCurrentConversation();
  } catch (error) {
    list.replaceChildren(el("li", { className: "error" }, `Could not list conversations: ${describeError(error)}`));
  }
}

async function openConversation(id) {
  try {
    const conversation = await api(`/conversations/${encodeURIComponent(id)}`);
    newConversation();
    state.conversationId = conversation.id;
    $("persona").value = conversation.persona;
    for (const message of conversation.messages) addMessage(message.role, message.content);
    say($("chat-status"), "Earlier answers are shown as text; ask a follow-up to continue (citation numbers continue).");
    markCurrentConversation();
  } catch (error) {
    say($("chat-status"), `Could not open the conversation: ${describeError(error)}`, "error");
  }
}

async function deleteConversation(conversation) {
  if (!confirm(`Delete the conversation "${conversation.title || "untitled"}"?`)) return;
  try {
    await api(`/conversations/${encodeURIComponent(conversation.id)}`, { method: "DELETE" });
    if (state.conversationId === conversation.id) newConversation();
    refreshConversations();
  } catch (error) {
    say($("chat-status"), `Could not delete the conversation: ${describeError(error)}`, "error");
  }
}

// -- start ----------------------------------------------------------------------------------------

function showSignIn() {
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
  $("admin-link").hidden = me.role !== "admin";
  $("sign-in").hidden = true;
  $("chat").hidden = false;
  $("chat-controls").hidden = false;
  state.viewer?.close();
  state.viewer = null;
  refreshConversations();
  $("question").focus();
}

$("ask-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const question = $("question").value.trim();
  if (!question || state.controller) return;
  $("question").value = "";
  ask(question);
});
$("question").addEventListener("keydown", (event) => {
  // Enter asks, Shift+Enter makes a new line.
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $("ask-form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => state.controller?.abort());
$("new-conversation").addEventListener("click", newConversation);
$("open-page").addEventListener("click", openAtPage);
$("close-panel").addEventListener("click", () => {
  $("citation-panel").hidden = true;
  document.querySelector(`.cite[data-number="${state.current?.number}"]`)?.focus();
});
$("citation-panel").addEventListener("keydown", (event) => {
  if (event.key === "Escape") $("close-panel").click();
});
$("sign-out").addEventListener("click", () => {
  state.controller?.abort();
  forgetKey();
  newConversation();
  showSignIn();
});
setUpSignIn($("sign-in-form"), $("sign-in-status"), start);

const me = await whoAmI();
if (me) start(me);
else showSignIn();
