// Locate a cited span, as citeline extracted it, in the text items of another extractor (PDF.js).
//
// citeline's page text comes from pypdfium2 plus cleaning; PDF.js splits the same page into text items
// that differ in whitespace, hyphenation, ligatures, accents and, on multi-column, rotated or
// line-numbered pages, in reading order. Offsets therefore cannot be carried over. Both sides are
// folded to the characters they agree on (letters and digits, lower case, compatibility-decomposed,
// marks dropped), each folded character remembering where it came from, and the span is found by
// content: whole if it occurs as one run, otherwise piece by piece.

const KEEP = /[\p{L}\p{N}]/u;
const MARKS = /\p{M}/gu;
// A piece found anywhere on the page must be at least PIECE_MIN folded characters long, or
// UNIQUE_MIN if it occurs only once on the page (a page number in a running head); shorter or
// repeated ones ("of the", "and a") occur everywhere and would highlight the wrong words. A piece
// that continues exactly where the previous one ended needs only CONTINUE_MIN.
const PIECE_MIN = 8;
const UNIQUE_MIN = 4;
const CONTINUE_MIN = 2;

const foldCache = new Map();

function foldCodePoint(ch) {
  let folded = foldCache.get(ch);
  if (folded === undefined) {
    folded = "";
    for (const c of ch.normalize("NFKD").replace(MARKS, "").toLowerCase()) {
      if (KEEP.test(c)) folded += c;
    }
    foldCache.set(ch, folded);
  }
  return folded;
}

/**
 * Fold `texts` into one string of letters and digits, with where each folded UTF-16 unit came from.
 *
 * Returns `{text, item, from, to}`: `text` is the folded string; for each index `i` of `text`,
 * `item[i]` is the index in `texts` and `[from[i], to[i])` the UTF-16 range in `texts[item[i]]` of
 * the character it was folded from.
 */
export function fold(texts) {
  let text = "";
  const item = [];
  const from = [];
  const to = [];
  texts.forEach((source, index) => {
    let offset = 0;
    for (const ch of source) {
      const folded = foldCodePoint(ch);
      for (let k = 0; k < folded.length; k++) {
        item.push(index);
        from.push(offset);
        to.push(offset + ch.length);
      }
      text += folded;
      offset += ch.length;
    }
  });
  return { text, item, from, to };
}

/** `span` folded as {@link fold} folds a page: letters and digits only, lower case, no accents. */
export function foldText(span) {
  return fold([span]).text;
}

function commonPrefix(page, at, span, i) {
  let n = 0;
  while (at + n < page.length && i + n < span.length && page[at + n] === span[i + n]) n++;
  return n;
}

// The longest prefix of span[i:] found anywhere in page, and of its occurrences the one nearest `near`.
function longestMatch(page, span, i, near) {
  let lo = 0;
  let hi = span.length - i;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (page.includes(span.slice(i, i + mid))) lo = mid;
    else hi = mid - 1;
  }
  if (lo === 0) return { at: -1, length: 0, unique: false };
  const needle = span.slice(i, i + lo);
  const first = page.indexOf(needle);
  let best = first;
  let count = 0;
  for (let at = first; at >= 0; at = page.indexOf(needle, at + 1)) {
    count++;
    if (near >= 0 && Math.abs(at - near) < Math.abs(best - near)) best = at;
  }
  return { at: best, length: lo, unique: count === 1 };
}

// Whether a word may begin or end at folded position `p` of `folded` (from {@link fold}): at either
// end, between two items, or where something that folds to nothing (a space, a hyphen) lies between.
function wordEdge(folded, p) {
  if (p <= 0 || p >= folded.text.length) return true;
  return folded.item[p - 1] !== folded.item[p] || folded.to[p - 1] < folded.from[p];
}

// How much of a run of `length` at page[at:] and span[i:] to keep: all of it, or back to where a word
// of the page or of the span ends. A run that stops inside a word on both sides stops where the two
// read different words ("handgun p|ermits" for "handgun p|rivate"), and that word is not the span's.
function cutBack(page, at, span, i, length) {
  let n = length;
  while (n > 0 && !wordEdge(page, at + n) && !wordEdge(span, i + n)) n--;
  return n;
}

// Cover span with runs of page: continue where the last run ended while the two agree; else go on
// where an earlier run ended, with whole words (a table's header row, where citeline names each column
// with the group drawn once over all of them: "Handgun Pre-Pawn | Long Gun Pre-Pawn"); else jump to
// the longest run found anywhere, if it is long enough and not begun inside a word on both sides
// (unless a shorter one can go on after an earlier run). A character found in no run is left unmatched.
function pieces(pageFolded, spanFolded) {
  const page = pageFolded.text;
  const span = spanFolded.text;
  const found = [];
  const ends = []; // where each run ended in page, the last run's last
  let i = 0;
  while (i < span.length) {
    const left = span.length - i;
    const last = found.length ? found[found.length - 1] : null;
    if (last) {
      const run = cutBack(pageFolded, last.end, spanFolded, i, commonPrefix(page, last.end, span, i));
      if (run >= Math.min(CONTINUE_MIN, left)) {
        last.end += run;
        ends[ends.length - 1] = last.end;
        i += run;
        continue;
      }
    }
    let resume = null;
    for (let k = ends.length - 2; k >= 0 && !resume; k--) {
      const at = ends[k];
      if (!wordEdge(pageFolded, at) || !wordEdge(spanFolded, i)) continue;
      let run = commonPrefix(page, at, span, i);
      while (run > 0 && !(wordEdge(pageFolded, at + run) && wordEdge(spanFolded, i + run))) run--;
      if (run >= Math.min(CONTINUE_MIN, left)) resume = { k, at, length: run };
    }
    const jump = longestMatch(page, span, i, last ? last.end : -1);
    let length = 0;
    if (jump.length && (wordEdge(pageFolded, jump.at) || wordEdge(spanFolded, i))) {
      length = cutBack(pageFolded, jump.at, spanFolded, i, jump.length);
      // Cut back, it may be found more often than the whole run was.
      const unique =
        length === jump.length
          ? jump.unique
          : length > 0 && occurrences(page, span.slice(i, i + length)).length === 1;
      if (length < Math.min(unique ? UNIQUE_MIN : PIECE_MIN, span.length)) length = 0;
    }
    if (resume && resume.length >= length) {
      ends.splice(resume.k, 1);
      found.push({ start: resume.at, end: resume.at + resume.length });
      ends.push(resume.at + resume.length);
      i += resume.length;
    } else if (length) {
      found.push({ start: jump.at, end: jump.at + length });
      ends.push(jump.at + length);
      i += length;
    } else {
      i += 1;
    }
  }
  return found;
}

function occurrences(text, needle) {
  const found = [];
  for (let at = text.indexOf(needle); at >= 0; at = text.indexOf(needle, at + 1)) found.push(at);
  return found;
}

/**
 * How many times `spanText` occurs whole in `pageText` before offset `start`: which occurrence of a
 * passage that a page repeats ("In hac habitasse platea dictumst.") citeline cited, for
 * {@link locateSpan}'s `occurrence`.
 */
export function occurrenceBefore(pageText, start, spanText) {
  const span = foldText(spanText);
  return span ? occurrences(foldText(pageText.slice(0, start) + spanText), span).length - 1 : 0;
}

/**
 * Where `spanText` lies in `items` (the strings of a page's text items, in order).
 *
 * Returns `{ranges, matched, total, repeats}`: `ranges` lists `{item, start, end, piece}` (UTF-16
 * offsets into `items[item]`), in the span's order, `piece` numbering the runs the span was found in
 * (one when it occurs whole); `matched` of the span's `total` folded characters were found; `repeats`
 * is how often the span occurs whole on the page. Where it occurs more than once, `occurrence`
 * (0-based, see {@link occurrenceBefore}) picks which, the first by default. Characters other than
 * letters and digits take no part in matching, but those between two matched ones in the same item
 * are inside the range.
 */
export function locateSpan(items, spanText, { occurrence = 0 } = {}) {
  const page = fold(items);
  const span = foldText(spanText);
  if (!span) return { ranges: [], matched: 0, total: 0, repeats: 0 };
  const wholes = occurrences(page.text, span);
  const whole = wholes[Math.min(occurrence, wholes.length - 1)];
  const runs = wholes.length ? [{ start: whole, end: whole + span.length }] : pieces(page, fold([spanText]));
  const ranges = [];
  let matched = 0;
  runs.forEach((run, piece) => {
    matched += run.end - run.start;
    let current = null;
    for (let p = run.start; p < run.end; p++) {
      if (current && current.item === page.item[p]) {
        current.end = Math.max(current.end, page.to[p]);
      } else {
        // A run that goes on into the next item takes in what lies between: the hyphen or comma
        // that ends one line and whatever opens the next.
        const crossing = current !== null;
        if (crossing) current.end = items[current.item].length;
        current = { item: page.item[p], start: crossing ? 0 : page.from[p], end: page.to[p], piece };
        ranges.push(current);
      }
    }
  });
  extendEdges(items, ranges, spanText);
  return { ranges, matched, total: span.length, repeats: wholes.length };
}

// Matching sees only letters and digits; take in the span's own punctuation at either end ("(see",
// "results.") where the item has the very same characters there.
function extendEdges(items, ranges, spanText) {
  if (!ranges.length) return;
  const lead = spanText.match(/^[^\p{L}\p{N}]*/u)[0].trimStart();
  const trail = spanText.match(/[^\p{L}\p{N}]*$/u)[0].trimEnd();
  const first = ranges[0];
  const last = ranges[ranges.length - 1];
  if (lead && items[first.item].slice(0, first.start).endsWith(lead)) first.start -= lead.length;
  if (trail && items[last.item].startsWith(trail, last.end)) last.end += trail.length;
}
