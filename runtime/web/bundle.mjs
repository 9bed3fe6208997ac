// bundle.mjs — the .ssmb kernel bundle (bundle/bundle.h), read in JavaScript:
// the 64-byte header, the FNV-1a 64 checksum, and the manifest, checked
// field by field with the rules of bundle/manifest.c, so that the WebGPU
// runtime may trust what it holds (indices in range, regions inside their
// buffers and aligned, blobs inside the blob section, sizes that agree with
// shapes, the WGSL slots of every dispatch inside their windows). Errors
// read like the C reader's: "m.ssmb: corrupt manifest: programs.decode.
// steps[3].kernel is not an integer in the range it must have".

import { parseJson, JsonError } from './json.mjs';
import { qLayout } from './transform.mjs';

export const BUNDLE_VERSION = 6;
export const SAMPLER_STATE_LEN = 8;
const HEADER_SIZE = 64;
const MAX_BYTES = 1e15;
const MAX_DIM = 1e12;
const MAX_ITEMS = 1000000;
const MAX_BUFFERS = 64;
const MAX_BINDINGS = 32;
const MAX_WINDOWS = 65536;
const MAX_RANK = 6;
const USAGES = ['state', 'activations', 'weights', 'output', 'slots'];
export const DTYPE_SIZE = { f32: 4, f16: 2, bf16: 2, i32: 4, q8_0: 1, q4_0: 1 };

export class BundleError extends Error {}

// FNV-1a 64 of bytes, as two 32-bit halves (prime 2^40 + 0x1b3), returned
// as a BigInt.
export function fnv1a64(bytes) {
  let hi = 0xcbf29ce4, lo = 0x84222325;
  for (let i = 0; i < bytes.length; i++) {
    lo = (lo ^ bytes[i]) >>> 0;
    const p = lo * 0x1b3;
    hi = (hi * 0x1b3 + Math.floor(p / 4294967296) + ((lo << 8) >>> 0)) >>> 0;
    lo = p >>> 0;
  }
  return (BigInt(hi) << 32n) | BigInt(lo);
}

function u64(view, off) {
  const v = view.getBigUint64(off, true);
  return v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : Infinity;
}

// Reads and checks a bundle from its bytes (a Uint8Array); `name` starts
// every message. Returns { name, manifest, blob(b) -> Uint8Array,
// text(b) -> string }.
export function readBundle(bytes, name) {
  if (!(bytes instanceof Uint8Array)) bytes = new Uint8Array(bytes);
  const size = bytes.length;
  const magic = String.fromCharCode(...bytes.subarray(0, 4));
  if (size < HEADER_SIZE || magic !== 'SSMB')
    throw new BundleError(`${name}: not an ssmc bundle (bad magic or shorter than its 64-byte header)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const version = view.getUint32(4, true);
  const moff = u64(view, 8), mlen = u64(view, 16), boff = u64(view, 24), blen = u64(view, 32);
  if (version !== BUNDLE_VERSION)
    throw new BundleError(`${name}: bundle format version ${version}, but this ssmc reads version ` +
                          `${BUNDLE_VERSION}; compile it again with \`ssmc compile\``);
  if (moff !== HEADER_SIZE || mlen > size - moff || boff > size || blen !== size - boff ||
      boff !== Math.ceil((moff + mlen) / 16) * 16)
    throw new BundleError(`${name}: truncated or corrupt bundle (sections [${moff},+${mlen}) and ` +
                          `[${boff},+${blen}) do not fit its ${size} bytes)`);
  if (bytes.subarray(48, HEADER_SIZE).some((b) => b !== 0))
    throw new BundleError(`${name}: corrupt bundle (reserved header bytes are not zero)`);
  // the header is outside the checksum: the manifest's length is checked
  // exactly (grown into the zero padding after it, the JSON would parse)
  if (bytes.subarray(moff, moff + mlen).includes(0) || bytes.subarray(moff + mlen, boff).some((b) => b !== 0))
    throw new BundleError(`${name}: corrupt bundle (the manifest's length, ${mlen} bytes, does not end at its text)`);
  if (fnv1a64(bytes.subarray(HEADER_SIZE)) !== view.getBigUint64(40, true))
    throw new BundleError(`${name}: corrupt bundle (checksum mismatch)`);
  let json;
  try {
    json = parseJson(new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(moff, moff + mlen)));
  } catch (e) {
    // bundle/manifest.c's words: ssm_json_parse's message names the "manifest"
    const dup = e instanceof JsonError && !e.message.startsWith('not valid');
    throw new BundleError(`${name}: corrupt manifest: ${dup ? `manifest: ${e.message}` : 'not JSON'}`);
  }
  const manifest = parseManifest(json, name, blen);
  const blobs = bytes.subarray(boff);
  const blob = (b) => blobs.subarray(b.offset, b.offset + b.size);
  return { name, manifest, blob, text: (b) => new TextDecoder().decode(blob(b)) };
}

// ---- the manifest (bundle/manifest.c's reader) --------------------------------------

class Reader {
  constructor(name, blobsSize) {
    this.name = name;
    this.blobsSize = blobsSize;
    this.path = [];
  }
  bad(what) {
    const p = this.path.join('').replace(/^\./, '');
    return new BundleError(`${this.name}: corrupt manifest: ${p || 'the manifest'} ${what}`);
  }
  at(key, fn) {
    this.path.push(typeof key === 'number' ? `[${key}]` : `.${key}`);
    try {
      return fn();
    } finally {
      this.path.pop();
    }
  }
  get(obj, key) {
    if (obj === null || typeof obj !== 'object' || Array.isArray(obj) || !(key in obj))
      throw this.at(key, () => this.bad('is missing'));
    return obj[key];
  }
  int(j, lo, hi) {
    if (typeof j !== 'number' || !(j >= lo && j <= hi) || j !== Math.floor(j))
      throw this.bad('is not an integer in the range it must have');
    return j;
  }
  num(obj, key, lo, hi) {
    const j = this.get(obj, key);
    return this.at(key, () => this.int(j, lo, hi));
  }
  str(obj, key) {
    const j = this.get(obj, key);
    if (typeof j !== 'string') throw this.at(key, () => this.bad('is not a string'));
    return j;
  }
  nums(j, len, lo, hi, what) {
    if (!Array.isArray(j) || j.length !== len) throw this.bad(what);
    return j.map((v) => this.int(v, lo, hi));
  }
  list(obj, key, min, max) {
    const j = this.get(obj, key);
    if (!Array.isArray(j) || j.length < min || j.length > max)
      throw this.at(key, () => this.bad(`is not a list of ${min} to ${max} items`));
    return j;
  }
}

function region(r, m, j) {
  const [buffer, offset, bytes] = r.nums(j, 3, 0, MAX_BYTES, 'is not a [buffer, offset, bytes] region');
  if (buffer >= m.buffers.length) throw r.bad('names a buffer that does not exist');
  const cap = m.buffers[buffer].bytes;
  if (offset > cap || bytes > cap - offset) throw r.bad('lies outside its buffer');
  if (offset % m.align) throw r.bad("is not aligned to the manifest's align");
  return { buffer, offset, bytes };
}

function fieldRegion(r, m, obj, key) {
  const j = r.get(obj, key);
  return r.at(key, () => region(r, m, j));
}

function fieldBlob(r, obj, key) {
  const j = r.get(obj, key);
  return r.at(key, () => {
    const [offset, size] = r.nums(j, 2, 0, MAX_BYTES, 'is not an [offset, size] blob');
    if (offset > r.blobsSize || size > r.blobsSize - offset) throw r.bad('lies outside the blob section');
    return { offset, size };
  });
}

function tensorType(r, obj) {
  const dtype = r.str(obj, 'dtype');
  const shape = r.get(obj, 'shape');
  if (!(dtype in DTYPE_SIZE)) throw r.at('dtype', () => r.bad('is not f32, f16, bf16, i32, q8_0 or q4_0'));
  return r.at('shape', () => {
    if (!Array.isArray(shape) || shape.length > MAX_RANK) throw r.bad('is not a list of at most 6 dimensions');
    let bytes = DTYPE_SIZE[dtype];
    const dims = shape.map((d) => {
      const v = r.int(d, 1, MAX_DIM);
      bytes *= v;
      if (bytes > MAX_BYTES) throw r.bad('describes a tensor too large for any buffer');
      return v;
    });
    // quantized: its scales too (transform.mjs: qLayout)
    return { dtype, shape: dims, bytes: dtype.startsWith('q') ? qLayout(dims, dtype).bytes : bytes };
  });
}

function tensors(r, m, root, key, weight) {
  const arr = r.list(root, key, 0, MAX_ITEMS);
  return arr.map((e, i) => r.at(key, () => r.at(i, () => {
    const name = r.str(e, 'name');
    const { dtype, shape, bytes } = tensorType(r, e);
    const reg = fieldRegion(r, m, e, 'region');
    const transform = weight ? r.str(e, 'transform') : '';
    if (reg.bytes !== bytes) throw r.bad('has a region whose size does not match its shape');
    // a batch program's state (slots.*) lies in a slots buffer
    const slots = !weight && name.startsWith('slots.');
    if (m.buffers[reg.buffer].usage !== (weight ? 'weights' : slots ? 'slots' : 'state'))
      throw r.bad(weight ? 'lies outside a weights buffer'
        : slots ? 'lies outside a slots buffer' : 'lies outside a state buffer');
    if (!weight && dtype !== 'f32' && dtype !== 'i32') throw r.bad('is not an f32 or i32 state');
    return { name, dtype, shape, transform, region: reg };
  })));
}

function kernels(r, root) {
  const arr = r.list(root, 'kernels', 0, MAX_ITEMS);
  return arr.map((e, i) => r.at('kernels', () => r.at(i, () => {
    const k = { name: r.str(e, 'name'), family: r.str(e, 'template'), params: r.str(e, 'params') };
    k.nbindings = r.num(e, 'bindings', 1, MAX_BINDINGS);
    k.spirv = fieldBlob(r, e, 'spirv');
    k.glsl = fieldBlob(r, e, 'glsl');
    k.wgsl = fieldBlob(r, e, 'wgsl');
    if (k.spirv.size % 4 || k.spirv.offset % 4 || k.spirv.size < 20) throw r.bad('has a malformed SPIR-V blob');
    if (!k.wgsl.size) throw r.bad('has an empty WGSL blob');
    const slots = r.get(e, 'wgsl_slots'), windows = r.get(e, 'wgsl_windows');
    k.slots = r.at('wgsl_slots', () => {
      const s = r.nums(slots, k.nbindings, 0, k.nbindings - 1, 'is not a list of one slot per binding');
      let n = 0;
      for (const v of s) {
        if (v > n) throw r.bad('does not number the slots in order of first use');
        if (v === n) n++;
      }
      return s;
    });
    const nslots = Math.max(...k.slots) + 1;
    k.windows = r.at('wgsl_windows', () =>
      r.nums(windows, nslots, 1, MAX_WINDOWS, 'is not a list of one window count per slot'));
    return k;
  })));
}

function stepSlots(r, m, st) {
  const k = m.kernels[st.kernel];
  for (let s = 0; s < k.windows.length; s++) {
    let lo = Infinity, hi = 0, buffer = -1;
    st.bindings.forEach((g, b) => {
      if (k.slots[b] !== s) return;
      if (buffer >= 0 && g.buffer !== buffer) throw r.bad('puts the bindings of one WGSL slot in two buffers');
      buffer = g.buffer;
      lo = Math.min(lo, g.offset);
      hi = Math.max(hi, g.offset + g.bytes);
    });
    if (hi - lo > k.windows[s] * m.wgsl_window) throw r.bad("has a WGSL slot wider than its kernel's windows");
  }
  if (m.buffers[st.bindings[0].buffer].usage === 'weights') throw r.bad('writes its result into a weights buffer');
}

function steps(r, m, jp) {
  const arr = r.list(jp, 'steps', 0, MAX_ITEMS);
  return arr.map((e, i) => r.at('steps', () => r.at(i, () => {
    const st = {};
    st.kernel = r.num(e, 'kernel', 0, m.kernels.length - 1);
    st.barrier = r.num(e, 'barrier', 0, 1);
    st.op = r.str(e, 'op');
    const groups = r.get(e, 'groups');
    st.groups = r.at('groups', () => {
      if (!Array.isArray(groups) || groups.length !== 3) throw r.bad('is not three workgroup counts');
      return groups.map((g) => r.int(g, 1, 65535));
    });
    const binds = r.get(e, 'bindings');
    const nb = m.kernels[st.kernel].nbindings;
    st.bindings = r.at('bindings', () => {
      if (!Array.isArray(binds) || binds.length !== nb) throw r.bad('does not give one region per binding of its kernel');
      return binds.map((b, k) => r.at(k, () => {
        const g = region(r, m, b);
        if (!g.bytes) throw r.bad('is empty');
        return g;
      }));
    });
    stepSlots(r, m, st);
    return st;
  })));
}

function program(r, m, progs, which) {
  const jp = r.get(progs, which);
  return r.at(which, () => {
    const p = {};
    p.tokens = r.num(jp, 'tokens', 1, 1 << 20);
    if (which === 'decode' && p.tokens !== 1) throw r.bad('does not run one token');
    const inputs = r.get(jp, 'inputs');
    r.at('inputs', () => {
      p.tokensIn = fieldRegion(r, m, inputs, 'tokens');
      if (p.tokensIn.bytes !== p.tokens * 4) throw r.bad('has a tokens input whose size is not tokens i32s');
      p.hasPos = inputs !== null && typeof inputs === 'object' && 'pos' in inputs;
      if (p.hasPos) {
        p.pos = fieldRegion(r, m, inputs, 'pos');
        // a batch program's rows each have a position
        const npos = which === 'batch' ? p.tokens : 1;
        if (p.pos.bytes !== 4 * npos)
          throw r.bad(npos === 1 ? 'has a pos input that is not one i32' : 'has a pos input that is not one i32 a row');
        if (!m.max_seq) throw r.bad('reads pos, but max_seq is 0');
      }
    });
    p.output = fieldRegion(r, m, jp, 'output');
    if (p.output.bytes !== p.tokens * m.vocab * 4) throw r.bad('has an output whose size is not tokens x vocab f32s');
    const sm = jp.sampler;
    p.hasSampler = sm !== undefined;
    if (p.hasSampler) r.at('sampler', () => {
      p.next = fieldRegion(r, m, sm, 'next');
      p.sampler = fieldRegion(r, m, sm, 'state');
      const rows = which === 'batch' ? p.tokens : 1; // a batch program draws a row each
      if (p.next.bytes !== 4 * rows || p.sampler.bytes !== SAMPLER_STATE_LEN * 4 * rows ||
          (rows === 1 && p.tokens !== 1))
        throw r.bad('has regions of the wrong size (or a program of more than one token)');
      p.hasSeen = sm.seen !== undefined;
      if (p.hasSeen) {
        p.seen = fieldRegion(r, m, sm, 'seen');
        if (rows !== 1 || p.seen.bytes !== Math.ceil(m.vocab / 24) * 4)
          throw r.bad('has a seen-token set that is not f32[ceil(vocab / 24)] of one sequence');
      }
    });
    p.anyCount = jp.any_count !== undefined;
    if (p.anyCount && (jp.any_count !== true || p.tokens < 2))
      throw r.bad('has an any_count that is not true, or runs one token');
    p.activation_bytes = r.num(jp, 'activation_bytes', 0, MAX_BYTES);
    p.activation_bytes_unplanned = r.num(jp, 'activation_bytes_unplanned', 0, MAX_BYTES);
    p.ir = fieldBlob(r, jp, 'ir');
    p.steps = steps(r, m, jp);
    return p;
  });
}

// Checks a parsed manifest (bundle/manifest.c's rules) and returns it typed.
export function parseManifest(root, name, blobsSize) {
  const r = new Reader(name, blobsSize);
  if (root === null || typeof root !== 'object' || Array.isArray(root)) throw r.bad('is not a JSON object');
  const m = {};
  if (r.num(root, 'ssmb', 0, 1e9) !== BUNDLE_VERSION)
    throw r.at('ssmb', () => r.bad('differs from the version in the header'));
  m.generator = r.str(root, 'generator');
  m.architecture = r.str(root, 'architecture');
  m.vocab = r.num(root, 'vocab', 1, 1 << 30);
  m.max_seq = r.num(root, 'max_seq', 0, 1 << 24);
  m.eos = r.num(root, 'eos_token_id', -1, 1 << 30);
  m.dtype = r.str(root, 'dtype');
  if (!['f32', 'f16', 'bf16', 'q8_0', 'q4_0'].includes(m.dtype)) throw r.at('dtype', () => r.bad('is not f32, f16, bf16, q8_0 or q4_0'));
  m.align = r.num(root, 'align', 4, 1 << 16);
  if (m.align & (m.align - 1)) throw r.at('align', () => r.bad('is not a power of two'));
  m.wgsl_window = r.num(root, 'wgsl_window', 256, MAX_BYTES);
  if (m.wgsl_window < m.align || Math.log2(m.wgsl_window) % 1)
    throw r.at('wgsl_window', () => r.bad('is not a power of two of at least align bytes'));
  const bufs = r.list(root, 'buffers', 1, MAX_BUFFERS);
  m.buffers = bufs.map((e, i) => r.at('buffers', () => r.at(i, () => {
    const usage = r.str(e, 'usage');
    const bytes = r.num(e, 'bytes', 4, MAX_BYTES);
    if (!USAGES.includes(usage)) throw r.bad('has a usage other than state, activations, weights, output or slots');
    return { usage, bytes };
  })));
  m.weights = tensors(r, m, root, 'weights', true);
  // one sequence's states; a batched program's (slots.*, in a slots buffer) apart
  const states = tensors(r, m, root, 'state', false);
  m.states = states.filter((s) => m.buffers[s.region.buffer].usage !== 'slots');
  m.slotStates = states.filter((s) => m.buffers[s.region.buffer].usage === 'slots');
  m.kernels = kernels(r, root);
  const progs = r.get(root, 'programs');
  r.at('programs', () => {
    m.decode = program(r, m, progs, 'decode');
    m.prefill = program(r, m, progs, 'prefill');
    if (m.prefill.hasSampler) throw r.bad('gives the prefill program a sampler');
    const d = m.decode;
    if (d.hasSampler && (m.buffers[d.sampler.buffer].usage !== 'state' ||
                         m.buffers[d.next.buffer].usage !== 'activations'))
      throw r.bad("places the decode program's sampler outside the state and activations");
    // the batched decode program (ssmc compile --slots), when there is one
    if (progs !== null && typeof progs === 'object' && 'batch' in progs) {
      const b = m.batch = program(r, m, progs, 'batch');
      if (!b.hasSampler || b.anyCount || m.buffers[b.sampler.buffer].usage !== 'slots' ||
          m.buffers[b.next.buffer].usage !== 'activations')
        throw r.bad('gives the batch program no sampler, any_count or a sampler outside the slots and activations');
    }
  });
  // the weights directory it was compiled with (bundle/manifest.c: source)
  if ('source' in root) {
    const src = root.source;
    if (src === null || typeof src !== 'object' || Array.isArray(src))
      throw r.at('source', () => r.bad('is not an object'));
    const dir = r.at('source', () => r.str(src, 'dir'));
    if (!dir.startsWith('/') || dir.length >= 4096)
      throw r.at('source', () => r.at('dir', () => r.bad('is not an absolute path (of at most 4095 bytes)')));
    m.sourceDir = dir;
  }
  // the config.json keys it was compiled with (bundle/manifest.c: config)
  if ('config' in root) {
    const c = root.config;
    if (c === null || typeof c !== 'object' || Array.isArray(c) || Object.keys(c).length > 4096)
      throw r.at('config', () => r.bad('is not an object (of at most 4096 keys)'));
    m.config = c;
  }
  return m;
}

// ---- the weights' config.json against the one the bundle was compiled with ---------

// config.json as transformers writes it: JSON with Python's Infinity,
// -Infinity and NaN, which become {"__float__": ...} (base/json.c's rule).
export function parseConfig(text) {
  let out = '';
  for (let i = 0; i < text.length;) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (j < text.length && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    const word = ['-Infinity', 'Infinity', 'NaN'].find((w) => text.startsWith(w, i));
    if (word) {
      out += `{"__float__":"${word}"}`;
      i += word.length;
      continue;
    }
    out += c;
    i++;
  }
  return parseJson(out);
}

// A number, or its {"__float__": ...} form; undefined for anything else.
function configNumber(v) {
  if (typeof v === 'number') return v;
  if (v && typeof v === 'object' && !Array.isArray(v) && Object.keys(v).length === 1 &&
      typeof v.__float__ === 'string')
    return { Infinity: Infinity, '-Infinity': -Infinity, NaN: NaN }[v.__float__];
  return undefined;
}

function configEqual(a, b) {
  const x = configNumber(a), y = configNumber(b);
  if (x !== undefined && y !== undefined) return x === y || (Number.isNaN(x) && Number.isNaN(y));
  if (Array.isArray(a) && Array.isArray(b))
    return a.length === b.length && a.every((e, i) => configEqual(e, b[i]));
  if (a && b && typeof a === 'object' && typeof b === 'object' && !Array.isArray(a) && !Array.isArray(b)) {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => k in b && configEqual(a[k], b[k]));
  }
  return a === b;
}

// The value at dotted path `key` ("text_config.d_model", "layers.0"), as
// ssm_json_path finds it; undefined where there is none.
function configPath(root, key) {
  let cur = root;
  for (const part of key.split('.')) {
    if (!part || part.length > 128 || cur === null || typeof cur !== 'object') return undefined;
    if (Array.isArray(cur)) {
      if (!/^\d{1,6}$/.test(part)) return undefined;
      cur = cur[Number(part)];
    } else {
      cur = Object.prototype.hasOwnProperty.call(cur, part) ? cur[part] : undefined;
    }
  }
  return cur;
}

function showValue(v) {
  if (v === undefined || v === null) return 'absent';
  const t = JSON.stringify(v);
  return t.length > 40 ? `${t.slice(0, 37)}...` : t;
}

// Checks the weights' config.json (its text `text`, read from `path`) against
// the keys bundle `b` recorded, as ssm_st_check_config does: a BundleError
// that names up to three keys that differ.
export function checkConfig(b, text, path, weights) {
  const recorded = b.manifest.config;
  if (!recorded) return;
  let now;
  try {
    now = parseConfig(text);
  } catch (e) {
    throw new BundleError(`${path}: not JSON (${e.message})`);
  }
  const what = [];
  let differ = 0;
  for (const [k, was] of Object.entries(recorded)) {
    const v = configPath(now, k);
    const absent = v === undefined || v === null, wasAbsent = was === null;
    if ((absent && wasAbsent) || (!absent && !wasAbsent && configEqual(was, v))) continue;
    if (++differ <= 3) what.push(`${k} is ${showValue(v)}, not ${showValue(was)}`);
  }
  if (differ > 3) what.push(`and ${differ - 3} more`);
  if (differ)
    throw new BundleError(`${b.name}: the weights ${weights} are not of the model it was compiled for: ` +
                          `${path} differs from the config it was compiled with (${what.join('; ')}); ` +
                          'compile a bundle for these weights (ssmc compile DIR -o OUT.ssmb)');
}
