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

// Cover span with runs of page: continue where the last run ended while the two agree, otherwise jump
// to the longest run found anywhere; a character found in no run long enough is left unmatched.
function pieces(page, span) {
  const found = [];
  let i = 0;
  let end = -1;
  while (i < span.length) {
    const left = span.length - i;
    const run = end >= 0 ? commonPrefix(page, end, span, i) : 0;
    if (run >= Math.min(CONTINUE_MIN, left)) {
      found[found.length - 1].end += run;
      i += run;
      end += run;
      continue;
    }
    const { at, length, unique } = longestMatch(page, span, i, end);
    if (length >= Math.min(unique ? UNIQUE_MIN : PIECE_MIN, span.length)) {
      found.push({ start: at, end: at + length });
      i += length;
      end = at + length;
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
  const runs = wholes.length ? [{ start: whole, end: whole + span.length }] : pieces(page.text, span);
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
