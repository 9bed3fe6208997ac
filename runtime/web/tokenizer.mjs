// tokenizer.mjs — BPE from a Hugging Face tokenizer.json, giving the ids
// that tokenizer/tokenizer.c (and so the `tokenizers` library) gives. The
// same pipeline, step for step:
//   1. added tokens whose `normalized` is false are split out of the raw
//      text (leftmost-longest, with single_word / lstrip / rstrip);
//   2. the rest is normalized (NFC, NFD, NFKC, NFKD, Lowercase per
//      character, Strip, Replace, Prepend, Sequence) and the `normalized`
//      added tokens (themselves normalized) are split out of it;
//   3. the pre-tokenizer (ByteLevel, Metaspace, or a Sequence of Split,
//      Punctuation, Digits, Metaspace and ByteLevel) cuts each piece
//      further; the Split patterns are the GPT-2, GPT-4 / Llama-3 and Qwen2
//      regexes and "[0-9][0-9][0-9]", written with JavaScript's Unicode
//      property escapes (\s as \p{White_Space}, as Oniguruma reads it, and
//      the case-insensitive contractions spelled out); ByteLevel maps every
//      UTF-8 byte to its printable stand-in character; Metaspace turns
//      spaces into the replacement, prepended as prepend_scheme says;
//   4. each piece is merged by BPE: the pair of lowest merge rank first,
//      leftmost among equals, through a heap; it starts from the bytes'
//      tokens (byte-level) or the characters' tokens, with byte_fallback's
//      "<0xXX>" tokens or unk_token for characters not in the vocab.
// Decoding maps each token to bytes (ByteLevel's stand-ins, Metaspace's
// replacement as a space, the SentencePiece chain Replace / ByteFallback /
// Fuse / Strip); the stream decoder hands out whole UTF-8 characters only
// and turns invalid bytes into U+FFFD as Rust's String::from_utf8_lossy does,
// except that a ByteFallback run of "<0xXX>" tokens that is not valid UTF-8
// is one U+FFFD per byte, as the library decodes it. Anything the C tokenizer refuses is
// refused here, and what this one cannot read the same way (other regexes)
// is refused with the field named.

import { parseJson } from './json.mjs';

export class TokenizerError extends Error {}

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the others
// for 256, 257, ... in byte order.
const BYTE_CHAR = [];
const CHAR_BYTE = new Map();
{
  let next = 256;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
    const c = String.fromCodePoint(printable ? b : next++);
    BYTE_CHAR.push(c);
    CHAR_BYTE.set(c, b);
  }
}

const WS = '\\p{White_Space}';
const GPT2 = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
const GPT4 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| " +
             "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// The same in JavaScript: \s is Unicode White_Space, and the case-insensitive
// contractions are spelled out (ſ, U+017F, folds to s).
const jsPattern = (p) => p.replaceAll('[^\\s', `[^${WS}`).replaceAll('\\S', `[^${WS}]`).replaceAll('\\s', `[${WS}]`);
// Qwen2's: GPT-4's with single digits
const QWEN2 = GPT4.replace('\\p{N}{1,3}', '\\p{N}');
const CONTRACTIONS = "'(?:[sSſ]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])";
const caseless = (p) => CONTRACTIONS + p.slice(p.indexOf(')|') + 1);
const PATTERNS = {
  gpt2: new RegExp(jsPattern(GPT2), 'uy'),
  gpt4: new RegExp(jsPattern(caseless(GPT4)), 'uy'),
  qwen2: new RegExp(jsPattern(caseless(QWEN2)), 'uy'),
  digits3: /[0-9][0-9][0-9]/y,
};
// A Replace normalizer's regex is run by JavaScript only where Oniguruma
// reads it the same: literal characters, escaped punctuation, \t \n \r,
// bracket classes of those, and the quantifiers + * ? {m,n}; anything else
// (\s \w \d \b, groups, POSIX brackets) is refused.
const SIMPLE_REGEX = /^(?:[^\\()[\]|^$.]|\\[tnr]|\\[^\w\s]|\[\^?(?:[^\\\][]|\\[tnr]|\\[^\w\s])+\]|[+*?]|\{\d+(?:,\d*)?\})+$/u;
const BYTE_TOKEN = /^<0x([0-9A-F]{2})>$/;
const IS_SPACE = new RegExp(`^[${WS}]$`, 'u');
const IS_WORD = /^[\p{L}\p{N}\p{M}_\u200C\u200D]$/u;
const IS_PUNCT = /^(?:[!-/:-@[-`{-~]|\p{P})$/u;
const IS_NUMBER = /^\p{N}$/u;
const BEHAVIORS = ['Removed', 'Isolated', 'MergedWithPrevious', 'MergedWithNext', 'Contiguous'];

// Whether a string is valid Unicode (no lone surrogate): isWellFormed
// where the engine has it (Node 20+, current browsers).
const LONE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const wellFormed = (s) => (s.isWellFormed ? s.isWellFormed() : !LONE.test(s));
const typeOf = (j) => (j && typeof j === 'object' && typeof j.type === 'string' ? j.type : null);
const isObj = (j) => j !== null && typeof j === 'object' && !Array.isArray(j);

// A character of s at i (a whole code point) and its length in UTF-16 units.
function charAt(s, i) {
  const c = s.codePointAt(i);
  return c > 0xffff ? s.slice(i, i + 2) : s[i];
}
function charBefore(s, i) {
  const lo = s.charCodeAt(i - 1);
  return i >= 2 && lo >= 0xdc00 && lo <= 0xdfff ? s.slice(i - 2, i) : s[i - 1];
}

const ENC = new TextEncoder();
const escapeRegex = (t) => t.replace(/[\\^$.*+?()[\]{}|/-]/g, '\\$&');
const PREPEND_SCHEMES = ['always', 'first', 'never'];

// The normalizers of tokenizer.json (tokenizer/normalize.c's), appended to
// `out` as functions of (text, first) -> [text, first]; `first` says
// whether the text still begins the original one (Metaspace's "first").
function parseNormalizer(j, where, out, err, bool) {
  if (j === undefined || j === null) return;
  const t = typeOf(j);
  if (!isObj(j) || !t) throw err(`${where}: expected an object with a "type"`);
  const str = (key) => {
    if (typeof j[key] !== 'string') throw err(`${where}.${key}: expected a string`);
    return j[key];
  };
  if (t === 'Sequence') {
    if (!Array.isArray(j.normalizers)) throw err(`${where}.normalizers: expected an array`);
    j.normalizers.forEach((x, i) => parseNormalizer(x, `${where}.normalizers[${i}]`, out, err, bool));
  } else if (['NFC', 'NFD', 'NFKC', 'NFKD'].includes(t)) {
    out.push((s, first) => [s.normalize(t), first]);
  } else if (t === 'Lowercase') {
    // per character, as Rust's char::to_lowercase (no final-sigma rule)
    out.push((s, first) => [Array.from(s, (c) => c.toLowerCase()).join(''), first]);
  } else if (t === 'Strip') {
    for (const k of ['strip_left', 'strip_right'])
      if (typeof j[k] !== 'boolean') throw err(`${where}.${k}: expected true or false`);
    const left = j.strip_left, right = j.strip_right;
    out.push((s, first) => {
      const a = left ? s.length - s.replace(/^\p{White_Space}+/u, '').length : 0;
      const r = right ? s.slice(a).replace(/\p{White_Space}+$/u, '') : s.slice(a);
      return [r, first && a === 0];
    });
  } else if (t === 'Prepend') {
    const text = str('prepend');
    out.push((s, first) => [s ? text + s : s, first]);
  } else if (t === 'Replace') {
    const content = str('content');
    const re = patternRegex(j.pattern, `${where}.pattern`, err);
    out.push((s, first) => {
      if (!s) return [s, first]; // the library matches nothing in empty text
      // the library aligns the content with the last character matched: a
      // match at the start keeps the text's beginning only when it is
      // empty or one character long and the content is not empty
      re.lastIndex = 0;
      const m = re.exec(s);
      if (m && m.index === 0 && m[0].length > 0 && (!content || m[0].length > charAt(s, 0).length)) first = false;
      re.lastIndex = 0;
      return [s.replace(re, () => content), first];
    });
  } else {
    throw err(`${where}.type '${t}' is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, Strip, Replace, Prepend, Sequence)`);
  }
}

// A Replace's {"String": ...} or {"Regex": ...} as a global RegExp.
function patternRegex(p, where, err) {
  if (isObj(p) && typeof p.String === 'string') return new RegExp(escapeRegex(p.String), 'gu');
  if (!isObj(p) || typeof p.Regex !== 'string') throw err(`${where}: expected {"String": "..."} or {"Regex": "..."}`);
  const refuse = () => err(`${where}.Regex '${p.Regex}' is not supported (only literal characters, bracket classes ` +
                           'and quantifiers, which JavaScript and Oniguruma read alike)');
  if (!SIMPLE_REGEX.test(p.Regex)) throw refuse();
  try {
    return new RegExp(p.Regex, 'gu');
  } catch {
    throw refuse();
  }
}

function parsePrepend(j, where, err, bool) {
  const ps = j.prepend_scheme;
  if (ps === undefined || ps === null) return bool(j, 'add_prefix_space', where, true) ? 'always' : 'never';
  if (!PREPEND_SCHEMES.includes(ps)) throw err(`${where}.prepend_scheme: expected "always", "first" or "never"`);
  if (j.add_prefix_space === false && ps !== 'never')
    throw err(`${where}.add_prefix_space: false does not match prepend_scheme "${ps}"`);
  return ps;
}

function replacementOf(j, where, err) {
  const r = j.replacement ?? '\u2581';
  if (typeof r !== 'string' || [...r].length !== 1) throw err(`${where}.replacement: expected one character`);
  return r;
}

// Metaspace: spaces become the replacement, which is prepended as
// prepend_scheme says; with split, each piece is cut before each
// replacement character.
function parseMetaspace(j, where, err, bool) {
  return { kind: 'metaspace', repl: replacementOf(j, where, err), prepend: parsePrepend(j, where, err, bool),
           split: bool(j, 'split', where, true) };
}

// The decoder as what a stream needs: bytes(token) (each token's bytes),
// firstSpace (Metaspace: the first token loses a leading space) and
// stripStart (a Strip after Fuse: up to that many leading spaces of the
// whole text go). Supported: ByteLevel, Metaspace, and the SentencePiece
// chain Sequence[Replace(String)..., ByteFallback, Fuse, Strip(" ", n, 0)]
// (each part optional, in that order).
function parseDecoder(j, err) {
  const t = typeOf(j);
  if (t === 'ByteLevel')
    return { bytes: (s) => {
      const chars = [...s];
      return chars.every((c) => CHAR_BYTE.has(c)) ? Uint8Array.from(chars, (c) => CHAR_BYTE.get(c)) : ENC.encode(s);
    }, fallbackByte: () => -1, firstSpace: false, stripStart: 0 };
  if (t === 'Metaspace') {
    const repl = replacementOf(j, 'decoder', err);
    return { bytes: (s) => ENC.encode(s.replaceAll(repl, ' ')), fallbackByte: () => -1, firstSpace: parsePrepend(j, 'decoder', err, () => true) !== 'never',
             stripStart: 0 };
  }
  if (t !== 'Sequence')
    throw err(`decoder.type '${j !== undefined && j !== null ? t ?? '?' : 'null'}' is not supported ` +
              '(supported: ByteLevel, Metaspace, Sequence of Replace, ByteFallback, Fuse, Strip)');
  if (!Array.isArray(j.decoders)) throw err('decoder.decoders: expected an array');
  const ORDER = ['Replace', 'ByteFallback', 'Fuse', 'Strip'];
  const replaces = [];
  let byteFallback = false, stripStart = 0, at = 0;
  j.decoders.forEach((d, i) => {
    const where = `decoder.decoders[${i}]`, dt = typeOf(d);
    const k = ORDER.indexOf(dt);
    if (k < 0 || k < at || (k === at && dt !== 'Replace') || (dt === 'Strip' && at !== 2))
      throw err(`${where}.type '${dt ?? '?'}' is not supported here (supported: Sequence[Replace..., ByteFallback, Fuse, Strip], in that order)`);
    at = k;
    if (dt === 'Replace') {
      if (!isObj(d.pattern) || typeof d.pattern.String !== 'string' || typeof d.content !== 'string')
        throw err(`${where}: only a Replace of a {"String": ...} pattern by a string is supported`);
      replaces.push([d.pattern.String, d.content]);
    } else if (dt === 'ByteFallback') byteFallback = true;
    else if (dt === 'Strip') {
      if (d.content !== ' ' || d.stop !== 0 || !Number.isInteger(d.start) || d.start < 0)
        throw err(`${where}: only Strip(" ", start, 0) after a Fuse is supported`);
      stripStart = d.start;
    }
  });
  const replaced = (s) => replaces.reduce((t, [a, b]) => t.replaceAll(a, b), s);
  return { bytes: (s) => ENC.encode(replaced(s)), fallbackByte: (s) => {
    const m = byteFallback && BYTE_TOKEN.exec(replaced(s));
    return m ? parseInt(m[1], 16) : -1;
  }, firstSpace: false, stripStart };
}

export class Tokenizer {
  // Parses tokenizer.json text; `path` names it in messages.
  constructor(text, path) {
    const err = (msg) => new TokenizerError(`${path}: ${msg}`);
    let root;
    try {
      root = parseJson(text);
    } catch (e) {
      throw new TokenizerError(`${path}: ${e.message}`);
    }
    if (!isObj(root)) throw err('expected a JSON object');
    const model = root.model;
    if (!isObj(model)) throw err('model: missing or not an object');
    const bool = (obj, key, where, dflt) => {
      const v = obj[key];
      if (v === undefined || v === null) return dflt;
      if (typeof v !== 'boolean') throw err(`${where}.${key}: expected true or false`);
      return v;
    };
    // model options
    const mt = typeOf(model);
    if (mt && mt !== 'BPE') throw err(`model.type '${mt}' is not supported (only BPE)`);
    if (!mt && !('merges' in model)) throw err('model: no "type" and no "merges" (expected BPE)');
    this.byteFallback = bool(model, 'byte_fallback', 'model', false);
    this.fuseUnk = bool(model, 'fuse_unk', 'model', false);
    const unk = model.unk_token;
    if (unk !== undefined && unk !== null && typeof unk !== 'string') throw err('model.unk_token: expected a string or null');
    this.ignoreMerges = bool(model, 'ignore_merges', 'model', false);
    const dropout = model.dropout;
    if (dropout !== undefined && dropout !== null && dropout !== 0) throw err('model.dropout is not supported (must be null)');
    for (const a of ['continuing_subword_prefix', 'end_of_word_suffix']) {
      const v = model[a];
      if (v !== undefined && v !== null && v !== '') throw err(`model.${a} is not supported (must be null)`);
    }
    // normalizer
    this.normalizers = [];
    parseNormalizer(root.normalizer, 'normalizer', this.normalizers, err, bool);
    // pre-tokenizer
    const pt = root.pre_tokenizer;
    const parseStep = (j, where) => {
      const t = typeOf(j);
      if (!isObj(j) || !t) throw err(`${where}: expected an object with a "type"`);
      const behavior = () => {
        const b = j.behavior;
        if (b === undefined || b === null) return 'Isolated';
        if (typeof b === 'string' && BEHAVIORS.includes(b)) return b;
        throw err(`${where}.behavior: expected one of Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous`);
      };
      if (t === 'ByteLevel')
        return { kind: 'bytelevel', addPrefixSpace: bool(j, 'add_prefix_space', where, true),
                 useRegex: bool(j, 'use_regex', where, true) };
      if (t === 'Punctuation') return { kind: 'punct', behavior: behavior() };
      if (t === 'Metaspace') return parseMetaspace(j, where, err, bool);
      if (t === 'Digits') {
        const individual = bool(j, 'individual_digits', where, false);
        return { kind: 'digits', behavior: individual ? 'Isolated' : 'Contiguous' };
      }
      if (t === 'Split') {
        const step = { kind: 'split', behavior: behavior(), invert: bool(j, 'invert', where, false) };
        const p = j.pattern;
        if (isObj(p) && typeof p.String === 'string' && p.String) return { ...step, literal: p.String };
        if (!isObj(p) || typeof p.Regex !== 'string')
          throw err(`${where}.pattern: expected {"String": "..."} or {"Regex": "..."}`);
        const re = p.Regex;
        const name = re === GPT2 ? 'gpt2' : re === GPT4 ? 'gpt4' : re === QWEN2 ? 'qwen2'
                   : re === '[0-9][0-9][0-9]' || re === '\\d{3}' ? 'digits3' : null;
        if (!name)
          throw new TokenizerError(`${path}: ${where}.pattern.Regex '${re}' is not supported (supported: the GPT-2, ` +
                                   `GPT-4/Llama-3 and Qwen2 split patterns and "[0-9][0-9][0-9]")`);
        return { ...step, pattern: PATTERNS[name] };
      }
      throw err(`${where}.type '${t}' is not supported (supported: ByteLevel, Split, Punctuation, Digits, Metaspace, Sequence)`);
    };
    if (pt === undefined || pt === null) this.steps = [];
    else if (typeOf(pt) === 'Sequence') {
      if (!Array.isArray(pt.pretokenizers)) throw err('pre_tokenizer.pretokenizers: expected an array');
      this.steps = pt.pretokenizers.map((j, i) => parseStep(j, `pre_tokenizer.pretokenizers[${i}]`));
    } else this.steps = [parseStep(pt, 'pre_tokenizer')];
    // byte-level BPE (its pieces are bytes' stand-in characters), or BPE on
    // characters (with byte_fallback's "<0xXX>" tokens and unk_token)
    const nbl = this.steps.filter((s) => s.kind === 'bytelevel').length;
    if (nbl > 1) throw err(`pre_tokenizer: ${nbl} ByteLevel pre-tokenizers (at most one is supported)`);
    this.byteLevel = nbl === 1;
    // post-processor and decoder
    const pp = root.post_processor;
    if (pp !== undefined && pp !== null && typeOf(pp) !== 'ByteLevel') {
      let ok = false, t = typeOf(pp);
      if (t === 'Sequence') {
        ok = true;
        for (const e of Array.isArray(pp.processors) ? pp.processors : []) if (typeOf(e) !== 'ByteLevel') (t = typeOf(e)), (ok = false);
      }
      if (!ok) throw err(`post_processor.type '${t ?? '?'}' is not supported (only null or ByteLevel: ssmc adds no tokens around the text)`);
    }
    this.decoder = parseDecoder(root.decoder, err);
    this.#loadVocab(root, model, err, bool);
    this.#loadMerges(model, err);
    this.unkId = -1;
    if (typeof unk === 'string') {
      this.unkId = this.vocab.get(unk) ?? -1;
      if (this.unkId < 0) throw err(`model.unk_token '${unk}' is not in model.vocab`);
    }
    const hex = (b) => b.toString(16).toUpperCase().padStart(2, '0');
    this.byteId = BYTE_CHAR.map((c, b) => {
      const id = this.byteLevel ? this.vocab.get(c) : this.byteFallback ? this.vocab.get(`<0x${hex(b)}>`) ?? -1 : -1;
      if (id === undefined)
        throw err(`model.vocab lacks the byte-level token '${c}' for byte 0x${hex(b)} ` +
                  '(a byte-level BPE vocab covers all 256 bytes)');
      return id;
    });
    this.decoded = this.str.map((s, id) => (s === undefined ? undefined : this.decoder.bytes(this.decodedText[id] ?? s)));
    this.fallbackByte = this.str.map((s, id) => (s === undefined ? -1 : this.decoder.fallbackByte(this.decodedText[id] ?? s)));
  }

  #loadVocab(root, model, err, bool) {
    const vocab = model.vocab;
    if (!isObj(vocab)) throw err('model.vocab: missing or not an object');
    const added = root.added_tokens;
    if (added !== undefined && added !== null && !Array.isArray(added)) throw err('added_tokens: expected an array');
    const isId = (v) => typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 0x7ffffffe;
    let maxId = -1;
    const entries = Object.entries(vocab);
    for (const [tok, id] of entries) {
      if (!isId(id)) throw err(`model.vocab: the id of '${tok}' is not an integer in [0, 2147483646]`);
      maxId = Math.max(maxId, id);
    }
    if (!entries.length) throw err('model.vocab is empty');
    (added ?? []).forEach((e, i) => {
      if (!isId(e?.id)) throw err(`added_tokens[${i}].id: expected an integer in [0, 2147483646]`);
      if (typeof e.content !== 'string' || !e.content) throw err(`added_tokens[${i}].content: expected a non-empty string`);
      if (!wellFormed(e.content)) throw err(`added_tokens[${i}].content: not valid UTF-8`);
      maxId = Math.max(maxId, e.id);
    });
    this.vocabSize = maxId + 1;
    this.str = new Array(this.vocabSize);
    this.decodedText = [];
    this.special = new Uint8Array(this.vocabSize);
    this.vocab = new Map();
    const isAdded = new Uint8Array(this.vocabSize);
    for (const [tok, id] of entries) {
      if (this.str[id] !== undefined) throw err(`model.vocab: id ${id} is given to both '${this.str[id]}' and '${tok}'`);
      this.str[id] = tok;
      this.vocab.set(tok, id);
    }
    this.added = (added ?? []).map((e, i) => {
      const where = `added_tokens[${i}]`;
      const a = { id: e.id, special: bool(e, 'special', where, false), lstrip: bool(e, 'lstrip', where, false),
                  rstrip: bool(e, 'rstrip', where, false), singleWord: bool(e, 'single_word', where, false) };
      a.normalized = bool(e, 'normalized', where, !a.special);
      if (isAdded[a.id]) throw err(`${where}: id ${a.id} is already added token '${this.str[a.id]}'`);
      if (this.str[a.id] !== undefined && this.str[a.id] !== e.content)
        throw err(`${where}: id ${a.id} is '${this.str[a.id]}' in model.vocab but '${e.content}' here`);
      this.str[a.id] ??= e.content;
      isAdded[a.id] = 1;
      this.special[a.id] = a.special ? 1 : 0;
      // a normalized token is matched, and (as the library since 0.23 does)
      // decoded, in its normalized form
      a.content = a.normalized ? this.#normalize(e.content, true).text : e.content;
      if (a.content !== e.content) this.decodedText[a.id] = a.content;
      return a;
    });
  }

  #loadMerges(model, err) {
    const merges = model.merges;
    if (merges !== undefined && merges !== null && !Array.isArray(merges)) throw err('model.merges: expected an array');
    this.merges = new Map();
    (merges ?? []).forEach((e, rank) => {
      let a = null, b = null;
      if (typeof e === 'string') {
        const sp = e.indexOf(' ');
        if (sp >= 0 && e.indexOf(' ', sp + 1) < 0) (a = e.slice(0, sp)), (b = e.slice(sp + 1));
      } else if (Array.isArray(e) && e.length === 2 && typeof e[0] === 'string' && typeof e[1] === 'string') {
        [a, b] = e;
      }
      if (a === null) throw err(`model.merges[${rank}]: expected "A B" or ["A", "B"]`);
      const ia = this.vocab.get(a), ib = this.vocab.get(b), ij = this.vocab.get(a + b);
      if (ia === undefined || ib === undefined || ij === undefined)
        throw err(`model.merges[${rank}]: '${ia === undefined ? a : ib === undefined ? b : a + b}' is not in model.vocab`);
      if (!this.merges.has(ia)) this.merges.set(ia, new Map());
      this.merges.get(ia).set(ib, { rank, id: ij }); // a later duplicate replaces an earlier one
    });
  }

  // The id of the token spelled `token` (an added token, or a model token
  // in its byte-level spelling), or -1.
  tokenId(token) {
    const a = this.added.find((x) => this.str[x.id] === token);
    if (a) return a.id;
    return this.vocab.get(token) ?? -1;
  }

  // ---- encoding ----

  // The normalizers over s; whether it still begins the original text.
  #normalize(s, first) {
    for (const f of this.normalizers) [s, first] = f(s, first);
    return { text: s, first };
  }

  // Splits piece s by the added tokens whose `normalized` is `normalized`.
  #splitAdded(s, normalized, out, first) {
    let startOffset = 0, i = 0;
    const n = s.length;
    while (i < n) {
      let best = null;
      for (; i < n && !best; i++)
        for (const a of this.added)
          if (a.normalized === normalized && (!best || a.content.length > best.content.length) && s.startsWith(a.content, i))
            best = a;
      if (!best) break;
      let start = --i, stop = i + best.content.length;
      i = stop;
      if (best.singleWord) {
        const before = start > 0 && IS_WORD.test(charBefore(s, start));
        const after = stop < n && IS_WORD.test(charAt(s, stop));
        if (before || after) continue;
      }
      if (best.lstrip) {
        let ns = start;
        while (ns > 0) {
          const c = charBefore(s, ns);
          if (!IS_SPACE.test(c)) break;
          ns -= c.length;
        }
        start = Math.max(ns, startOffset);
      }
      if (best.rstrip) while (stop < n && IS_SPACE.test(charAt(s, stop))) stop += charAt(s, stop).length;
      if (startOffset < start) out.push({ text: s.slice(startOffset, start), id: -1, first: first && startOffset === 0 });
      out.push({ text: s.slice(start, stop), id: best.id });
      startOffset = stop;
    }
    if (startOffset < n) out.push({ text: s.slice(startOffset), id: -1, first: first && startOffset === 0 });
  }

  // The segments of s for a step: matches and the gaps between them.
  #segments(step, s) {
    const segs = [];
    let i = 0, gap = 0;
    const push = (a, b, match) => segs.push({ a, b, match });
    const n = s.length;
    while (i < n) {
      const c = charAt(s, i);
      let e = i;
      if (step.kind === 'punct') e = IS_PUNCT.test(c) ? i + c.length : i;
      else if (step.kind === 'digits') e = IS_NUMBER.test(c) ? i + c.length : i;
      else if (step.literal !== undefined) e = s.startsWith(step.literal, i) ? i + step.literal.length : i;
      else {
        step.pattern.lastIndex = i;
        const m = step.pattern.exec(s);
        if (m) e = i + m[0].length;
      }
      if (e > i) {
        if (gap < i) push(gap, i, false);
        push(i, e, true);
        gap = i = e;
      } else i += c.length;
    }
    if (gap < n) push(gap, n, false);
    return segs;
  }

  #splitBy(step, s, segs, out, first) {
    if (step.invert) for (const v of segs) v.match = !v.match;
    let list = segs;
    if (step.behavior === 'Removed') list = segs.filter((v) => !v.match);
    else if (step.behavior === 'Contiguous' || step.behavior === 'MergedWithPrevious') {
      list = [];
      let prev = false;
      for (const v of segs) {
        const merge = step.behavior === 'Contiguous' ? v.match === prev : v.match && !prev;
        if (merge && list.length) list[list.length - 1].b = v.b;
        else list.push({ ...v });
        prev = v.match;
      }
    } else if (step.behavior === 'MergedWithNext') {
      list = [];
      let prev = false;
      for (let k = segs.length - 1; k >= 0; k--) {
        const v = segs[k];
        if (v.match && !prev && list.length) list[0].a = v.a;
        else list.unshift({ ...v });
        prev = v.match;
      }
    }
    for (const v of list) if (v.b > v.a) out.push({ text: s.slice(v.a, v.b), id: -1, first: first && v.a === 0 });
  }

  #byteLevel(step, text, out) {
    const s = step.addPrefixSpace && text[0] !== ' ' ? ' ' + text : text;
    const segs = step.useRegex ? this.#segments({ kind: 'split', pattern: PATTERNS.gpt2 }, s) : [{ a: 0, b: s.length }];
    const enc = new TextEncoder();
    for (const v of segs) {
      if (v.b <= v.a) continue;
      let t = '';
      for (const b of enc.encode(s.slice(v.a, v.b))) t += BYTE_CHAR[b];
      out.push({ text: t, id: -1, bytes: true });
    }
  }

  // Metaspace on piece p (tokenizer/pretokenize.c's metaspace).
  #metaspace(st, p, out) {
    const s = p.text;
    const prepend = !(s[0] === ' ' || s.startsWith(st.repl)) &&
                    (st.prepend === 'always' || (st.prepend === 'first' && p.first));
    const t = (prepend ? st.repl : '') + s.replaceAll(' ', st.repl);
    if (!st.split) return void out.push({ text: t, id: -1, first: p.first });
    this.#splitBy({ behavior: 'MergedWithNext' }, t, this.#segments({ kind: 'split', literal: st.repl }, t), out, p.first);
  }

  // The symbols BPE starts from, as the library's merge_word makes them:
  // byte-level, each stand-in character's byte token; else each
  // character's token, or with byte_fallback the "<0xXX>" tokens of its
  // bytes when all exist, or unk_token (consecutive ones fused with
  // fuse_unk; like the library, a pending unk stays pending across byte
  // tokens), or nothing.
  #symbols(piece) {
    if (this.byteLevel) return Array.from(piece, (c) => this.byteId[CHAR_BYTE.get(c)]);
    const ids = [];
    let unk = -1;
    for (const c of piece) {
      const id = this.vocab.get(c);
      if (id !== undefined) {
        if (unk >= 0) ids.push(unk), (unk = -1);
        ids.push(id);
        continue;
      }
      if (this.byteFallback) {
        const bytes = Array.from(ENC.encode(c), (b) => this.byteId[b]);
        if (bytes.every((b) => b >= 0)) {
          ids.push(...bytes);
          continue;
        }
      }
      if (this.unkId >= 0) {
        if (unk >= 0 && !this.fuseUnk) ids.push(unk);
        unk = this.unkId;
      }
    }
    if (unk >= 0) ids.push(unk);
    return ids;
  }

  // BPE over one piece: a heap of candidate merges ordered by
  // (rank, position); stale entries are skipped.
  #bpe(piece, ids) {
    if (this.ignoreMerges) {
      const id = this.vocab.get(piece);
      if (id !== undefined) return ids.push(id);
    }
    const syms = this.#symbols(piece).map((id, i, all) => ({ id, prev: i - 1, next: i + 1 < all.length ? i + 1 : -1,
                                                              alive: true }));
    if (!syms.length) return;
    const heap = [];
    const less = (x, y) => (x.rank !== y.rank ? x.rank < y.rank : x.pos < y.pos);
    const push = (m) => {
      let i = heap.length;
      heap.push(m);
      while (i > 0) {
        const p = (i - 1) >> 1;
        if (!less(m, heap[p])) break;
        heap[i] = heap[p];
        i = p;
      }
      heap[i] = m;
    };
    const pop = () => {
      const top = heap[0], last = heap.pop();
      if (heap.length) {
        let i = 0;
        for (;;) {
          const l = 2 * i + 1, r = l + 1;
          let m = i, best = last;
          if (l < heap.length && less(heap[l], best)) (m = l), (best = heap[l]);
          if (r < heap.length && less(heap[r], best)) m = r;
          if (m === i) break;
          heap[i] = heap[m];
          i = m;
        }
        heap[i] = last;
      }
      return top;
    };
    const pair = (pos) => {
      const a = syms[pos];
      if (a.next < 0) return;
      const m = this.merges.get(a.id)?.get(syms[a.next].id);
      if (m) push({ rank: m.rank, pos, id: m.id });
    };
    for (let i = 0; i + 1 < syms.length; i++) pair(i);
    while (heap.length) {
      const top = pop();
      const a = syms[top.pos];
      if (!a.alive || a.next < 0) continue;
      const b = syms[a.next];
      const m = this.merges.get(a.id)?.get(b.id);
      if (!m || m.id !== top.id) continue;
      a.id = top.id;
      b.alive = false;
      a.next = b.next;
      if (a.next >= 0) syms[a.next].prev = top.pos;
      if (a.prev >= 0) pair(a.prev);
      pair(top.pos);
    }
    for (let i = 0; i >= 0; i = syms[i].next) ids.push(syms[i].id);
  }

  // The ids of `text` (a string); added tokens in it become their ids.
  encode(text) {
    if (!wellFormed(text)) throw new TokenizerError('text is not valid Unicode (a lone surrogate)');
    let a = [], b = [];
    this.#splitAdded(text, false, a, true);
    for (const p of a) {
      if (p.id >= 0) b.push(p);
      else {
        const n = this.#normalize(p.text, p.first);
        this.#splitAdded(n.text, true, b, n.first);
      }
    }
    for (const step of this.steps) {
      a = [];
      for (const p of b) {
        if (p.id >= 0) a.push(p);
        else if (step.kind === 'bytelevel') this.#byteLevel(step, p.text, a);
        else if (step.kind === 'metaspace') this.#metaspace(step, p, a);
        else this.#splitBy(step, p.text, this.#segments(step, p.text), a, p.first);
      }
      b = a;
    }
    const ids = [];
    for (const p of b) {
      if (p.id >= 0) ids.push(p.id);
      else if (p.text) this.#bpe(p.text, ids);
    }
    return ids;
  }

  // The text of `ids` (the library's decode(ids, skipSpecial)); an unknown
  // id is an error.
  decode(ids, skipSpecial = false) {
    for (const id of ids)
      if (!(Number.isInteger(id) && id >= 0 && id < this.vocabSize) || this.str[id] === undefined)
        throw new TokenizerError(`token id ${id} is not in the vocabulary (size ${this.vocabSize})`);
    const d = new StreamDecoder(this, skipSpecial);
    return ids.map((id) => d.feed(id)).join('') + d.flush();
  }
}

// From a Uint8Array: how many bytes at in[i..] are a well-formed start of a
// UTF-8 character, and how many it needs (0 for a bad lead byte).
function utf8Prefix(bytes, i) {
  const c = bytes[i];
  const need = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
  if (!need) return { k: 0, need };
  let k = 1;
  for (; k < need && i + k < bytes.length; k++) {
    let lo = 0x80, hi = 0xbf;
    if (k === 1) {
      if (c === 0xe0) lo = 0xa0;
      if (c === 0xed) hi = 0x9f;
      if (c === 0xf0) lo = 0x90;
      if (c === 0xf4) hi = 0x8f;
    }
    if (bytes[i + k] < lo || bytes[i + k] > hi) break;
  }
  return { k, need };
}

const FFFD = [0xef, 0xbf, 0xbd];

// Feed one id at a time; each feed returns the text now complete (never
// half a UTF-8 character); flush returns what is held back.
export class StreamDecoder {
  constructor(tokenizer, skipSpecial = false) {
    this.t = tokenizer;
    this.skipSpecial = skipSpecial;
    this.pending = [];
    this.td = new TextDecoder();
    this.run = []; // ByteFallback's byte tokens not yet decoded
    this.started = false; // a token has been decoded (Metaspace's first one loses its space)
    this.stripLeft = tokenizer.decoder.stripStart; // leading spaces still to strip
  }

  // An id past the tokenizer's vocabulary, or a hole in it (a model's
  // padding), gives no text, as transformers' tokenizers decode it (the
  // library's stream decoder does the same); a negative id is an error.
  feed(id) {
    const t = this.t;
    if (!(Number.isInteger(id) && id >= 0))
      throw new TokenizerError(`token id ${id} is not in the vocabulary (size ${t.vocabSize})`);
    if (id >= t.vocabSize || t.str[id] === undefined) return '';
    if (this.skipSpecial && t.special[id]) return '';
    const fb = t.fallbackByte[id];
    if (fb >= 0) {
      this.run.push(fb);
      return '';
    }
    return this.#endRun() + this.#text(t.decoded[id]);
  }

  // ByteFallback: a run of "<0xXX>" tokens is its text when the bytes are
  // valid UTF-8, else one U+FFFD per byte (the library's rule).
  #endRun() {
    if (!this.run.length) return '';
    const bytes = Uint8Array.from(this.run);
    this.run = [];
    let text;
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    } catch {
      text = '\ufffd'.repeat(bytes.length);
    }
    return this.#text(ENC.encode(text));
  }

  // The text of the next token's bytes `own`: whole characters only.
  #text(own) {
    const t = this.t;
    if (t.decoder.firstSpace && !this.started && own[0] === 0x20) own = own.subarray(1);
    this.started = true;
    while (this.stripLeft > 0 && own.length && own[0] === 0x20) (own = own.subarray(1)), this.stripLeft--;
    if (own.length) this.stripLeft = 0;
    const bytes = Uint8Array.from([...this.pending, ...own]);
    this.pending = [];
    const out = [];
    for (let i = 0; i < bytes.length;) {
      const { k, need } = utf8Prefix(bytes, i);
      if (need && k === need) {
        for (let j = 0; j < k; j++) out.push(bytes[i + j]);
        i += k;
      } else if (need && i + k === bytes.length) {
        this.pending = [...bytes.subarray(i, i + k)];
        break;
      } else {
        out.push(...FFFD);
        i += k || 1;
      }
    }
    return this.td.decode(Uint8Array.from(out));
  }

  flush() {
    const run = this.#endRun();
    const held = this.pending.length;
    this.pending = [];
    return run + (held ? '\ufffd' : '');
  }
}
