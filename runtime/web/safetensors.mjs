// safetensors.mjs — Hugging Face safetensors checkpoints, read from any byte
// source: a file in Node (node.mjs) or a URL in the browser, read by HTTP
// Range requests on the .safetensors file itself (no conversion step), with
// progress and the Cache Storage API so that a reload downloads nothing.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON that map
// tensor names to {dtype, shape, data_offsets}, then the data section. The
// header is checked with the rules of runtime/weights/safetensors.c before
// any tensor is read: dtype known, shape of non-negative integers, offsets
// inside the data section, sizes that match the shape, no overlaps, no
// tensor in two shards. A sharded checkpoint is model.safetensors.index.json
// naming the shard of each tensor.

import { parseJson } from './json.mjs';
import { qLayout } from './transform.mjs';

const MAX_HEADER = 100 * 1024 * 1024;
const MAX_INT = 2 ** 53;
const DTYPES = { F32: 4, F16: 2, BF16: 2, I32: 4, I8: 1, U8: 1 };

// The names a quantized weight is stored under (runtime/weights/weights.h:
// ssm_st_quant_names): its blocks, `name` with "{*}" as "*" then ".q8_0" or
// ".q4_0" (I8 q8_0's q in the weight's shape; U8 q4_0's bytes, the last dim
// halved when even, else one dim of all the bytes), and its scales, that
// with ".scales" (F16, the last dim counting blocks).
export function quantNames(name, dtype) {
  const q = `${name.replace('{*}', '*')}.${dtype}`;
  return { q, d: `${q}.scales` };
}

export class WeightsError extends Error {}

function fmtDims(d) {
  return `[${d.join(',')}]`;
}

// The offset of the first byte of `b` that does not begin or continue a
// well-formed UTF-8 character (overlong forms, surrogates and code points
// past U+10FFFF included), or b.length.
function utf8Invalid(b) {
  for (let i = 0; i < b.length;) {
    const c = b[i];
    const len = c < 0x80 ? 1 : c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
    if (!len || i + len > b.length) return i;
    let v = len === 1 ? c : c & (0xff >> (len + 1));
    for (let k = 1; k < len; k++) {
      if ((b[i + k] & 0xc0) !== 0x80) return i;
      v = v * 64 + (b[i + k] & 0x3f);
    }
    if (v < [0, 0, 0x80, 0x800, 0x10000][len] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return i;
    i += len;
  }
  return b.length;
}

// Whether every string and key in `v` (parsed JSON) is well-formed UTF-16:
// an escaped lone surrogate (\ud800) is refused by the C reader's parser.
function wellFormed(v) {
  for (const stack = [v]; stack.length;) {
    const x = stack.pop();
    if (typeof x === 'string' && !x.isWellFormed()) return false;
    if (x === null || typeof x !== 'object') continue;
    for (const [k, e] of Object.entries(x)) {
      if (!k.isWellFormed()) return false;
      stack.push(e);
    }
  }
  return true;
}

// One .safetensors file: `source` has name, size (a number, or undefined
// until the first read tells) and read(offset, length) -> Promise<Uint8Array>.
async function loadFile(source, tensors) {
  const path = source.name;
  const head = await source.read(0, 8);
  if (head.length < 8)
    throw new WeightsError(`${path}: file is ${head.length} bytes, too short for a safetensors header`);
  const size = source.size;
  if (!(size >= 8)) throw new WeightsError(`${path}: the server did not say how large the file is`);
  const hlen = Number(new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true));
  if (hlen > MAX_HEADER)
    throw new WeightsError(`${path}: header length ${hlen} is absurd (limit ${MAX_HEADER} bytes)`);
  if (hlen > size - 8) throw new WeightsError(`${path}: header length ${hlen} exceeds the file (${size} bytes)`);
  const bytes = await source.read(8, hlen);
  let text;
  try { // fatal, and a byte-order mark kept: the C reader refuses both
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    throw new WeightsError(`${path}: header is not valid UTF-8 (at byte ${8 + utf8Invalid(bytes)})`);
  }
  let root;
  try {
    root = parseJson(text);
  } catch (e) {
    if (e.message.startsWith('not valid')) throw new WeightsError(`${path}: header is not valid JSON`);
    throw new WeightsError(`${path}: header: ${e.message}`);
  }
  if (!wellFormed(root)) throw new WeightsError(`${path}: header is not valid JSON (a lone surrogate)`);
  if (root === null || typeof root !== 'object' || Array.isArray(root))
    throw new WeightsError(`${path}: header is not a JSON object`);
  const dataStart = 8 + hlen, dataSize = size - dataStart;
  const ranges = [];
  for (const [name, e] of Object.entries(root)) {
    if (name === '__metadata__') {
      if (e === null || typeof e !== 'object' || Array.isArray(e))
        throw new WeightsError(`${path}: __metadata__ is not an object`);
      continue;
    }
    const where = `${path}: tensor '${name}'`;
    if (name.includes('\u0000'))
      throw new WeightsError(`${path}: tensor ${JSON.stringify(name)}: the name holds a NUL character ` +
                             '(\\u0000), a hole no tensor name may have');
    if (name.includes('{*}'))
      throw new WeightsError(`${where}: the name holds "{*}", which names a stacked weight ` +
                             '(its parts are stored as name.0, name.1, ...)');
    if (e === null || typeof e !== 'object' || Array.isArray(e)) throw new WeightsError(`${where}: entry is not an object`);
    if (typeof e.dtype !== 'string') throw new WeightsError(`${where}: dtype missing or not a string`);
    if (!(e.dtype in DTYPES)) throw new WeightsError(`${path}: unsupported dtype '${e.dtype}' for tensor '${name}'`);
    if (!Array.isArray(e.shape)) throw new WeightsError(`${where}: shape missing or not an array`);
    if (e.shape.length > 6) throw new WeightsError(`${where}: rank ${e.shape.length} exceeds 6`);
    const isUint = (v) => typeof v === 'number' && v >= 0 && v <= MAX_INT && Number.isInteger(v);
    let numel = 1;
    for (const v of e.shape) {
      if (!isUint(v)) throw new WeightsError(`${where}: shape must hold non-negative integers`);
      numel *= v;
      if (numel > MAX_INT) throw new WeightsError(`${where}: shape element count overflows`);
    }
    const nbytes = numel * DTYPES[e.dtype];
    const o = e.data_offsets;
    if (!Array.isArray(o) || o.length !== 2 || !isUint(o[0]) || !isUint(o[1]))
      throw new WeightsError(`${where}: data_offsets must be [begin,end] integers`);
    const [begin, end] = o;
    if (begin > end) throw new WeightsError(`${where}: data_offsets [${begin},${end}] decrease`);
    if (end > dataSize)
      throw new WeightsError(`${where}: data_offsets [${begin},${end}] exceed the data section (${dataSize} bytes)`);
    if (end - begin !== nbytes)
      throw new WeightsError(`${where}: data_offsets [${begin},${end}] hold ${end - begin} bytes but ` +
                             `${e.dtype} ${fmtDims(e.shape)} needs ${nbytes}`);
    if (tensors.has(name)) {
      const other = tensors.get(name).source.name;
      throw new WeightsError(other === path ? `${path}: duplicate tensor '${name}'`
                                            : `tensor '${name}' appears in both ${other} and ${path}`);
    }
    tensors.set(name, { name, dtype: e.dtype, shape: e.shape, offset: dataStart + begin, nbytes, source });
    ranges.push({ begin, end, name });
  }
  ranges.sort((a, b) => a.begin - b.begin);
  let prev = null;
  for (const r of ranges) {
    if (r.begin === r.end) continue;
    if (prev && r.begin < prev.end)
      throw new WeightsError(`${path}: tensors '${prev.name}' [${prev.begin},${prev.end}] and ` +
                             `'${r.name}' [${r.begin},${r.end}] overlap`);
    if (!prev || r.end > prev.end) prev = r;
  }
}

// f16 bits to a number.
function f16(h) {
  const e = (h >> 10) & 0x1f, m = h & 0x3ff, s = h & 0x8000 ? -1 : 1;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1024 + m) * 2 ** (e - 25);
}

export class Checkpoint {
  constructor(name, tensors) {
    this.name = name;
    this.tensors = tensors;
  }

  // Closes the sources that need it (files).
  async close() {
    const sources = new Set([...this.tensors.values()].map((t) => t.source));
    for (const s of sources) await s.close?.();
  }

  // Bytes of every tensor of the checkpoint (for progress).
  get bytes() {
    let n = 0;
    for (const t of this.tensors.values()) n += t.nbytes;
    return n;
  }

  // Tensor `name` as f32 (converted from F16 or BF16), checked against the
  // shape the model expects; errors name the tensor. A name holding "{*}"
  // is a stacked tensor (the experts of a mixture-of-experts layer): shape's
  // first dim counts its parts, part k is the tensor named with k in place
  // of "{*}", of shape without that dim, and the parts are placed one after
  // another (runtime/weights/safetensors.c's ssm_st_read). Every part is
  // checked before any is read.
  async readF32(name, shape) {
    const hole = name.indexOf('{*}');
    if (hole < 0) {
      this.#check(name, shape);
      return this.#read(name);
    }
    if (shape.length < 2)
      throw new WeightsError(`stacked tensor '${name}' needs a shape [parts, ...], not rank ${shape.length}`);
    const partShape = shape.slice(1), parts = [];
    for (let k = 0; k < shape[0]; k++) {
      const part = `${name.slice(0, hole)}${k}${name.slice(hole + 3)}`;
      try {
        this.#check(part, partShape);
      } catch (e) {
        throw new WeightsError(`part ${k} of stacked tensor '${name}': ${e.message}`);
      }
      parts.push(part);
    }
    const size = partShape.reduce((a, d) => a * d, 1);
    const out = new Float32Array(size * shape[0]);
    for (let k = 0; k < parts.length; k++) out.set(await this.#read(parts[k]), k * size);
    return out;
  }

  // A quantized weight stored so (quantNames) as its bytes in memory
  // (transform.mjs: qLayout: the blocks, then the scales, each finite), or
  // null when the checkpoint holds it as floats.
  async readQuant(name, shape, dtype) {
    const { q, d } = quantNames(name, dtype);
    if (!this.tensors.has(q)) return null;
    const l = qLayout(shape, dtype), last = shape.length - 1;
    const qShape = dtype === 'q8_0' ? shape : l.k % 2 === 0 ? [...shape.slice(0, last), l.k / 2]
                                                             : [Math.ceil(l.rows * l.k / 2)];
    const dShape = [...shape.slice(0, last), l.blocks];
    this.#check(q, qShape, dtype === 'q8_0' ? 'I8' : 'U8');
    this.#check(d, dShape, 'F16');
    const out = new Uint8Array(l.bytes);
    const qt = this.tensors.get(q), dt = this.tensors.get(d);
    out.set(await qt.source.read(qt.offset, qt.nbytes), 0);
    const scales = await dt.source.read(dt.offset, dt.nbytes);
    for (let i = 0; i < scales.length; i += 2)
      if ((scales[i + 1] & 0x7c) === 0x7c)
        throw new WeightsError(`tensor '${d}' in ${dt.source.name}: scale ${i / 2} is not finite`);
    out.set(scales, l.scales);
    return out;
  }

  #check(name, shape, dtype = null) {
    const t = this.tensors.get(name);
    if (!t) throw new WeightsError(`tensor '${name}' not found in ${this.name}`);
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
      throw new WeightsError(`tensor '${name}' has shape ${fmtDims(t.shape)} in the checkpoint but ` +
                             `the model expects ${fmtDims(shape)}`);
    const want = dtype ?? 'f32';
    if (dtype ? t.dtype !== dtype : ['I32', 'I8', 'U8'].includes(t.dtype))
      throw new WeightsError(`tensor '${name}' is ${t.dtype} in ${t.source.name} but the model expects ${want}`);
  }

  async #read(name) {
    const t = this.tensors.get(name);
    const raw = await t.source.read(t.offset, t.nbytes);
    const n = t.nbytes / DTYPES[t.dtype];
    const out = new Float32Array(n);
    const v = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
    if (t.dtype === 'F32') for (let i = 0; i < n; i++) out[i] = v.getFloat32(4 * i, true);
    else if (t.dtype === 'BF16') {
      const u = new Uint32Array(out.buffer);
      for (let i = 0; i < n; i++) u[i] = v.getUint16(2 * i, true) << 16;
    } else for (let i = 0; i < n; i++) out[i] = f16(v.getUint16(2 * i, true));
    return out;
  }
}

// Opens a checkpoint: model.safetensors, or the shards that
// model.safetensors.index.json names. `files` has exists(name) -> Promise
// <bool> and open(name) -> Promise<source>; `name` is the directory, for
// messages.
export async function openCheckpoint(files, name) {
  const opened = [];
  const open = async (n) => {
    const src = await files.open(n);
    opened.push(src);
    return src;
  };
  try {
    return new Checkpoint(name, await loadCheckpoint(files, open, name));
  } catch (e) {
    for (const src of opened) await src.close?.();
    throw e;
  }
}

async function loadCheckpoint(files, open, name) {
  const tensors = new Map();
  if (await files.exists('model.safetensors')) {
    await loadFile(await open('model.safetensors'), tensors);
    return tensors;
  }
  const index = 'model.safetensors.index.json';
  if (!(await files.exists(index)))
    throw new WeightsError(`${name}: no model.safetensors or model.safetensors.index.json`);
  const src = await open(index);
  const path = src.name;
  let root;
  try {
    root = parseJson(new TextDecoder().decode(await src.read(0, src.size)));
  } catch (e) {
    throw new WeightsError(`${path}: ${e.message}`);
  }
  const wm = root && root.weight_map;
  if (wm === null || typeof wm !== 'object' || Array.isArray(wm))
    throw new WeightsError(`${path}: no "weight_map" object`);
  const shards = [];
  for (const [t, f] of Object.entries(wm)) {
    if (typeof f !== 'string' || !f) throw new WeightsError(`${path}: tensor '${t}': shard is not a file name`);
    if (f.includes('/') || f.includes('..'))
      throw new WeightsError(`${path}: tensor '${t}': shard name '${f}' may not contain '/' or '..'`);
    if (!shards.includes(f)) shards.push(f);
  }
  for (const f of shards) {
    try {
      await loadFile(await open(f), tensors);
    } catch (e) {
      throw new WeightsError(`${path}: shard '${f}': ${e.message}`);
    }
  }
  for (const [t, f] of Object.entries(wm)) {
    const have = tensors.get(t);
    if (!have || have.source.name.split('/').pop() !== f)
      throw new WeightsError(`${path}: tensor '${t}' is mapped to shard '${f}' but is not in it`);
  }
  await src.close?.();
  return tensors;
}

// ---- HTTP (the browser, or Node's fetch) ---------------------------------------------

// A source over `url`, read by Range requests. A server that ignores Range
// (answers 200 with the whole file, as python3 -m http.server does) is read
// once in full and served from memory. With `cache` (a Cache from
// caches.open), every range read is kept under `url?ssmc-bytes=a-b` (a whole
// file under `url?ssmc-whole`; a query, since Cache Storage ignores
// fragments) and read from there next time. onBytes(n) is told each
// download's size, onCached(n) each read from the cache.
export function httpSource(url, { cache = null, onBytes = () => {}, onCached = () => {}, fetchFn = globalThis.fetch } = {}) {
  let whole = null, checked = false;
  const keyOf = (what) => `${url}${url.includes('?') ? '&' : '?'}ssmc-${what}`;
  const src = {
    name: url,
    size: undefined,
    async read(offset, length) {
      if (!checked && cache) {
        checked = true;
        const hit = await cache.match(keyOf('whole'));
        if (hit) whole = new Uint8Array(await hit.arrayBuffer());
        if (whole) {
          src.size = whole.length;
          onCached(whole.length);
        }
      }
      if (whole) return whole.subarray(offset, offset + length);
      if (!length) return new Uint8Array(0);
      const key = keyOf(`bytes=${offset}-${offset + length - 1}`);
      if (cache) {
        const hit = await cache.match(key);
        if (hit) {
          const total = Number(hit.headers.get('x-ssmc-total'));
          if (total) src.size = total;
          const bytes = new Uint8Array(await hit.arrayBuffer());
          if (bytes.length === length) {
            onCached(length);
            return bytes;
          }
        }
      }
      const res = await fetchFn(url, { headers: { Range: `bytes=${offset}-${offset + length - 1}` } });
      if (res.status !== 206 && res.status !== 200)
        throw new WeightsError(`${url}: HTTP ${res.status} ${res.statusText}`);
      const bytes = new Uint8Array(await res.arrayBuffer());
      onBytes(bytes.length);
      if (res.status === 200) { // no Range support: this is the whole file
        whole = bytes;
        src.size = bytes.length;
        if (cache) await cache.put(keyOf('whole'), cachedResponse(bytes, bytes.length));
        return whole.subarray(offset, offset + length);
      }
      const m = /\/(\d+)\s*$/.exec(res.headers.get('content-range') || '');
      if (m) src.size = Number(m[1]);
      if (bytes.length !== length)
        throw new WeightsError(`${url}: asked for ${length} bytes at ${offset}, got ${bytes.length} (truncated file?)`);
      if (cache) await cache.put(key, cachedResponse(bytes, src.size));
      return bytes;
    },
  };
  return src;
}

function cachedResponse(bytes, total) {
  return new Response(bytes, { status: 200, headers: { 'x-ssmc-total': String(total ?? 0) } });
}

// Files under a base URL, for openCheckpoint; `names` lists the files that
// exist (the site's manifest says which), so no request probes for others.
export function httpFiles(base, names, options = {}) {
  const url = (n) => new URL(n, base).href;
  return {
    exists: async (n) => names.includes(n),
    open: async (n) => {
      if (!names.includes(n)) throw new WeightsError(`${url(n)}: not part of this site`);
      const s = httpSource(url(n), options);
      if (n.endsWith('.json')) { // small: read it whole
        const res = await (options.fetchFn ?? fetch)(url(n));
        if (!res.ok) throw new WeightsError(`${url(n)}: HTTP ${res.status} ${res.statusText}`);
        const bytes = new Uint8Array(await res.arrayBuffer());
        return { name: s.name, size: bytes.length, read: async (o, l) => bytes.subarray(o, o + l) };
      }
      return s;
    },
  };
}
