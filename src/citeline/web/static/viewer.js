// The citation viewer: opens a cited document at its page with the cited span highlighted.
//
// A PDF is drawn by PDF.js (canvas plus text layer) and the span is found on the text layer by content
// (see locate.js); every other document (text, Markdown, HTML, CSV) is shown as its page text, as
// citeline extracted it, always as text and never as HTML, with the span's offsets highlighted.

import { foldText, locateSpan, occurrenceBefore } from "./locate.js";

export { foldText, locateSpan, occurrenceBefore };

const PDFJS = new URL("./vendor/pdfjs/pdf.min.mjs", import.meta.url).href;
const PDFJS_WORKER = new URL("./vendor/pdfjs/pdf.worker.min.mjs", import.meta.url).href;
// PDF.js's image decoders (JBIG2 and CCITT fax, JPEG 2000) are wasm modules it loads from this folder
// (with a trailing slash, as getDocument requires); without it such figures are drawn blank.
const PDFJS_WASM = new URL("./vendor/pdfjs/wasm/", import.meta.url).href;
// PDF.js is 1.8 MB with its worker: loaded on the first PDF, never for a reader of text documents.
// One worker serves every document and viewer: starting a worker costs a cold open a good part of its
// time, and PDF.js starts one per document unless it is given one.
let pdfjsPromise = null;

/** The zoom steps, as multiples of the page fitted to the viewer's width. */
export const ZOOMS = [1, 1.5, 2, 3];
// A canvas of more pixels is drawn at a lower resolution instead: at a device pixel ratio of 3, a page
// at 3x its phone width would take 16 million, and a larger canvas fails outright on some browsers
// (iOS Safari's limit is 4096 x 4096) or holds hundreds of megabytes.
const MAX_CANVAS_PIXELS = 16_000_000;

function loadPdfjs() {
  pdfjsPromise ??= import(PDFJS).then((pdfjs) => {
    pdfjs.GlobalWorkerOptions.workerSrc = PDFJS_WORKER;
    return { pdfjs, worker: new pdfjs.PDFWorker({ name: "citeline-viewer" }) };
  });
  return pdfjsPromise;
}

/** An error to show the reader as it is: its message says what failed, in words. */
export class ViewerError extends Error {
  name = "ViewerError";
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function describe(error) {
  if (error instanceof ViewerError) return error.message;
  // PDF.js reports HTTP failures with a status; anything else is a broken or unreadable file.
  if (error?.status) return `the server answered HTTP ${error.status}`;
  if (error?.name === "InvalidPDFException") return "the file is not a readable PDF";
  return error?.message || String(error);
}

function nextFrame() {
  return new Promise((resolve) => requestAnimationFrame(() => resolve()));
}

/**
 * Wrap the located ranges of a text layer's items in `<mark class="citeline-mark">` elements.
 *
 * `divs[i]` is the element holding item `i`'s text as its only child; `ranges` come from
 * {@link locateSpan}. Each mark carries `data-piece`, the run of the span it belongs to, so the span
 * can be read back in its own order even where the page's reading order differs.
 */
export function markRanges(divs, ranges) {
  const byItem = new Map();
  for (const range of ranges) {
    if (!byItem.has(range.item)) byItem.set(range.item, []);
    byItem.get(range.item).push(range);
  }
  const marks = [];
  for (const [item, itemRanges] of byItem) {
    const node = divs[item]?.firstChild;
    if (!node || node.nodeType !== Node.TEXT_NODE) continue;
    // From the last range back, so the text node always still holds the prefix the next one cuts.
    itemRanges.sort((a, b) => b.start - a.start);
    let limit = node.length;
    for (const { start, end, piece } of itemRanges) {
      const stop = Math.min(end, limit);
      if (start >= stop) continue;
      node.splitText(stop);
      const middle = node.splitText(start);
      const mark = element("mark", "citeline-mark");
      mark.dataset.piece = String(piece);
      middle.replaceWith(mark);
      mark.append(middle);
      marks.push(mark);
      limit = start;
    }
  }
  return marks;
}

/**
 * A viewer inside `container`. One instance keeps each opened PDF, so a second citation of the same
 * document opens without fetching or parsing it again.
 *
 * `headers` go with every request (e.g. `{Authorization: "Bearer <key>"}`).
 */
export class CitationViewer {
  constructor(container, { headers = {} } = {}) {
    this.container = container;
    this.headers = headers;
    this.documents = new Map();
    this.generation = 0;
    this.current = null;
    this.renderTask = null;
    this.textLayer = null;
    this.zoom = 1;
  }

  /**
   * Open a citation and resolve once its page is drawn and the span highlighted and in view.
   *
   * `citation` is `{fileUrl, pageUrl, contentType, page, start, end, text}`: `fileUrl` serves the
   * original (PDFs), `pageUrl` answers `{"page": n, "text": ...}` with the page text as citeline
   * extracted it (other types), `page` is 1-based, `[start, end)` are offsets into that page text and
   * `text` is the cited span itself. Resolves to `{matched, total, marks}`: how many of the span's
   * letters and digits were found, of how many, and the mark elements. A failure is shown in the
   * container in words and rejects with a {@link ViewerError}.
   */
  async open(citation) {
    return this.#run(async (generation) => {
      this.current = null;
      this.zoom = 1;
      if (!citation.contentType?.startsWith("application/pdf")) {
        return this.#openText(citation, generation);
      }
      const pdf = await this.#document(citation.fileUrl);
      this.#stale(generation);
      this.current = { pdf, citation };
      return this.#showPdfPage(citation.page, generation);
    });
  }

  /**
   * Show page `number` of the PDF opened last, marked if it is the cited page; the page's previous
   * and next buttons call this. Resolves like {@link CitationViewer#open}.
   */
  async showPage(number) {
    if (!this.current) throw new ViewerError("no PDF is open");
    return this.#run((generation) => this.#showPdfPage(number, generation));
  }

  /**
   * Redraw the page shown at `zoom` times the viewer's width (one of {@link ZOOMS}), the highlight
   * scrolled into view again; the zoom stays while paging, and a new citation opens at 1 (fit width).
   * The pager's zoom buttons call this. Resolves like {@link CitationViewer#open}.
   */
  async setZoom(zoom) {
    if (!this.current?.page) throw new ViewerError("no PDF page is shown");
    if (!ZOOMS.includes(zoom)) throw new ViewerError(`no zoom ${zoom}; the steps are ${ZOOMS.join(", ")}`);
    const box = this.container;
    // An unmarked page keeps the point at the middle of the view there.
    const centre = {
      x: (box.scrollLeft + box.clientWidth / 2) / box.scrollWidth,
      y: (box.scrollTop + box.clientHeight / 2) / box.scrollHeight,
    };
    this.zoom = zoom;
    return this.#run((generation) => this.#showPdfPage(this.current.page, generation, centre));
  }

  async #run(show) {
    const generation = ++this.generation;
    this.#cancel();
    this.container.setAttribute("aria-busy", "true");
    try {
      const result = await show(generation);
      if (generation === this.generation) await nextFrame();
      return result;
    } catch (error) {
      if (generation !== this.generation) throw new ViewerError("superseded by a newer citation");
      const message = `Could not open the cited page: ${describe(error)}.`;
      this.container.replaceChildren(element("p", "citeline-error", message));
      this.container.setAttribute("aria-busy", "false");
      throw new ViewerError(message, { cause: error });
    }
  }

  /** Release every document this viewer holds. */
  close() {
    this.generation++;
    this.#cancel();
    for (const task of this.documents.values()) task.destroy();
    this.documents.clear();
    this.current = null;
    this.container.replaceChildren();
  }

  #cancel() {
    this.renderTask?.cancel();
    this.textLayer?.cancel();
    this.renderTask = this.textLayer = null;
  }

  #stale(generation) {
    if (generation !== this.generation) throw new ViewerError("superseded by a newer citation");
  }

  async #document(fileUrl) {
    let task = this.documents.get(fileUrl);
    if (!task) {
      const { pdfjs, worker } = await loadPdfjs();
      // By URL rather than fetched bytes: PDF.js then asks for byte ranges where the server allows
      // them, and draws the cited page before the whole file has arrived.
      task = pdfjs.getDocument({
        url: fileUrl,
        httpHeaders: this.headers,
        isEvalSupported: false,
        wasmUrl: PDFJS_WASM,
        worker,
      });
      this.documents.set(fileUrl, task);
      task.promise.catch(() => this.documents.delete(fileUrl));
    }
    try {
      return await task.promise;
    } catch (error) {
      // PDF.js passes on fetch's own failure as an unknown error ("Failed to fetch"): asked once more
      // without it, a server out of reach is said as such.
      if (error?.name === "UnknownErrorException" && !(await this.#reachable(fileUrl))) {
        throw new ViewerError("the server could not be reached");
      }
      throw error;
    }
  }

  /** Whether `url` answers at all (any status): its first byte asked for. */
  async #reachable(url) {
    const request = new Request(url, { headers: { ...this.headers, Range: "bytes=0-0" } });
    try {
      (await fetch(request)).body?.cancel();
      return true;
    } catch {
      return false;
    }
  }

  async #showPdfPage(pageNumber, generation, centre = null) {
    const { pdf, citation } = this.current;
    if (!Number.isInteger(pageNumber) || pageNumber < 1 || pageNumber > pdf.numPages) {
      throw new ViewerError(`the document has ${pdf.numPages} pages and no page ${pageNumber}`);
    }
    const page = await pdf.getPage(pageNumber);
    this.#stale(generation);
    const { pdfjs } = await loadPdfjs();

    const width = Math.max(this.container.clientWidth - 2, 320) * this.zoom;
    const viewport = page.getViewport({ scale: width / page.getViewport({ scale: 1 }).width });
    const pixels = viewport.width * viewport.height;
    const ratio = Math.min(window.devicePixelRatio || 1, Math.sqrt(MAX_CANVAS_PIXELS / pixels));
    const sheet = element("div", "citeline-pdf-page");
    sheet.style.setProperty("--scale-factor", String(viewport.scale));
    sheet.style.setProperty("--user-unit", String(viewport.userUnit ?? 1));
    sheet.style.width = `${Math.floor(viewport.width)}px`;
    sheet.style.height = `${Math.floor(viewport.height)}px`;
    const canvas = element("canvas");
    canvas.width = Math.floor(viewport.width * ratio);
    canvas.height = Math.floor(viewport.height * ratio);
    canvas.style.width = `${Math.floor(viewport.width)}px`;
    canvas.style.height = `${Math.floor(viewport.height)}px`;
    canvas.setAttribute("role", "img");
    canvas.setAttribute("aria-label", `Page ${pageNumber} of ${pdf.numPages}`);
    const layer = element("div", "textLayer");
    sheet.append(canvas, layer);

    this.renderTask = page.render({
      canvas,
      canvasContext: canvas.getContext("2d"),
      viewport,
      transform: ratio === 1 ? null : [ratio, 0, 0, ratio, 0, 0],
    });
    this.textLayer = new pdfjs.TextLayer({
      textContentSource: page.streamTextContent(),
      container: layer,
      viewport,
    });
    const textLayer = this.textLayer;
    await Promise.all([this.renderTask.promise, textLayer.render()]);
    this.#stale(generation);
    this.renderTask = this.textLayer = null;
    this.current.page = pageNumber;

    if (pageNumber !== citation.page) {
      this.#show(sheet, this.#pager(pageNumber, pdf.numPages), [], centre);
      return { matched: 0, total: 0, marks: [] };
    }
    const items = textLayer.textContentItemsStr;
    let located = locateSpan(items, citation.text);
    if (located.repeats > 1 && citation.pageUrl) {
      // The page says the passage more than once: citeline's page text and offsets tell which.
      const occurrence = await this.#occurrence(citation);
      this.#stale(generation);
      if (occurrence > 0) located = locateSpan(items, citation.text, { occurrence });
    }
    const { ranges, matched, total } = located;
    const marks = markRanges(textLayer.textDivs, ranges);
    // A scan has no text layer: citeline read its text by OCR, and there is nothing here to mark.
    const scanned = !items.some((item) => item.trim());
    const note = marks.length
      ? "Cited page."
      : scanned
        ? "A scanned page with no text layer: the passage, read from it by OCR, cannot be marked on it."
        : "The cited passage could not be located on this page.";
    const pager = this.#pager(pageNumber, pdf.numPages);
    this.#show(sheet, pager, marks, centre, element("p", "citeline-caption citeline-note", note));
    return { matched, total, marks };
  }

  async #pageText(pageUrl) {
    const request = new Request(pageUrl, { headers: this.headers });
    let response;
    try {
      response = await fetch(request);
    } catch {
      // fetch's own failure (no server there, no network), in words rather than "Failed to fetch".
      throw new ViewerError("the server could not be reached");
    }
    if (!response.ok) throw new ViewerError(`the server answered HTTP ${response.status}`);
    const { text } = await response.json();
    if (typeof text !== "string") throw new ViewerError("the page has no text");
    return text;
  }

  async #occurrence(citation) {
    try {
      return occurrenceBefore(await this.#pageText(citation.pageUrl), citation.start, citation.text);
    } catch {
      return 0; // without the page text, the first occurrence is the best guess; the page still shows
    }
  }

  async #openText(citation, generation) {
    const text = await this.#pageText(citation.pageUrl);
    this.#stale(generation);

    const pre = element("pre", "citeline-text");
    let { start, end } = citation;
    // The offsets belong to the version that was cited; if the page text no longer holds the span
    // there (a newer version), look for the span by content instead of highlighting other words.
    if (foldText(text.slice(start, end)) !== foldText(citation.text)) {
      const { ranges } = locateSpan([text], citation.text);
      start = ranges.length ? Math.min(...ranges.map((r) => r.start)) : 0;
      end = ranges.length ? Math.max(...ranges.map((r) => r.end)) : 0;
    }
    const marks = [];
    if (end > start) {
      const mark = element("mark", "citeline-mark", text.slice(start, end));
      mark.dataset.piece = "0";
      pre.append(text.slice(0, start), mark, text.slice(end));
      marks.push(mark);
    } else {
      pre.textContent = text;
    }
    const note = marks.length ? "" : " (the cited passage could not be located on this page)";
    this.#show(pre, element("p", "citeline-caption", `Page ${citation.page}${note}`), marks);
    const total = foldText(citation.text).length;
    return { matched: marks.length ? total : 0, total, marks };
  }

  // "Page n of N" between "‹" and "›" (named "Previous page" and "Next page"), then the zoom's
  // buttons: one line at phone width (320 px of viewer at 360 px), so the labels are short and what
  // the page is (cited, scanned) is said on a line of its own under it (`note`).
  #pager(number, count) {
    const bar = element("nav", "citeline-caption citeline-pager");
    bar.setAttribute("aria-label", "Pages");
    const button = (text, name, target) => {
      const node = element("button", "", text);
      node.type = "button";
      node.setAttribute("aria-label", name);
      node.title = name;
      node.disabled = target < 1 || target > count;
      // A failure is already written in the viewer by #run; nothing waits on the promise here.
      node.addEventListener("click", () => this.showPage(target).catch(() => {}));
      return node;
    };
    bar.append(
      button("\u2039", "Previous page", number - 1),
      element("span", "", `Page ${number} of ${count}`),
      button("\u203a", "Next page", number + 1),
      this.#zoomButtons(),
    );
    return bar;
  }

  // "−", "Fit", "+" and the zoom in per cent, named "Zoom out", "Fit width" and "Zoom in".
  #zoomButtons() {
    const group = element("div", "citeline-zoom");
    group.setAttribute("role", "group");
    group.setAttribute("aria-label", "Zoom");
    const step = ZOOMS.indexOf(this.zoom);
    const button = (text, name, zoom) => {
      const node = element("button", "", text);
      node.type = "button";
      node.setAttribute("aria-label", name);
      node.title = name;
      node.disabled = zoom === undefined || zoom === this.zoom;
      node.addEventListener("click", () => this.setZoom(zoom).catch(() => {}));
      return node;
    };
    group.append(
      button("\u2212", "Zoom out", ZOOMS[step - 1]),
      button("Fit", "Fit width", ZOOMS[0]),
      button("+", "Zoom in", ZOOMS[step + 1]),
      element("output", "", `${Math.round(this.zoom * 100)}%`),
    );
    return group;
  }

  #show(body, caption, marks, centre = null, note = null) {
    // A page turned or zoomed from the keyboard: the focus is on a pager button replaced here, and
    // would fall to the body, out of the page's panel (whose Escape then no longer closes it) and its
    // Tab order. It goes to the same button of the new pager, or to another of its group (the page
    // buttons, the zoom's) where that one is now disabled (first or last page, zoom at an end).
    const focused = this.container.contains(document.activeElement) ? document.activeElement : null;
    const name = (button) => button.getAttribute("aria-label");
    const label = focused?.matches(".citeline-pager button") ? name(focused) : null;
    const zooming = Boolean(focused?.closest(".citeline-zoom"));
    this.container.replaceChildren(...[caption, note, body].filter(Boolean));
    this.container.setAttribute("aria-busy", "false");
    if (label !== null) {
      const buttons = [...caption.querySelectorAll("button")].filter((button) => !button.disabled);
      const group = buttons.filter((button) => Boolean(button.closest(".citeline-zoom")) === zooming);
      (buttons.find((button) => name(button) === label) ?? group[0] ?? buttons[0])?.focus({
        preventScroll: true,
      });
    }
    marks.sort((a, b) => Number(a.dataset.piece) - Number(b.dataset.piece));
    if (marks.length) {
      // Zoomed, the page is wider than the viewer: the passage is read from its start.
      marks[0].scrollIntoView({ block: "center", inline: this.zoom > 1 ? "start" : "nearest" });
    } else if (centre) {
      const box = this.container;
      box.scrollLeft = centre.x * box.scrollWidth - box.clientWidth / 2;
      box.scrollTop = centre.y * box.scrollHeight - box.clientHeight / 2;
    }
  }
}
