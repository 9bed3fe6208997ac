// transform.mjs — load-time weight transforms (runtime/weights/transform.c):
// a weight's `transform` is a comma-separated chain of unary ops of
// ir/ops.def ("exp,neg" is -exp(w)), applied once when the weight is loaded
// with the CPU interpreter's numerics: each op in double precision (the C
// column of ir/elementwise.def; JavaScript's Math is double), the result
// stored as f32. test/transform.test.mjs checks this table against
// elementwise.def.

// erfc in double (JavaScript's Math has none): the Maclaurin series of erf
// below |z| 2.5, the continued fraction of erfc (modified Lentz) above;
// erfc(-z) = 2 - erfc(z). test/transform.test.mjs checks it against C's.
export function erfc(z) {
  if (Number.isNaN(z)) return z;
  if (z < 0) return 2 - erfc(-z);
  if (z < 2.5) {
    let term = z, sum = z;
    for (let n = 1; n < 200 && Math.abs(term) > 1e-17 * Math.abs(sum); n++) {
      term *= (-z * z) / n;
      sum += term / (2 * n + 1);
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * sum;
  }
  if (z > 27) return 0; /* below the smallest double */
  // erfc(z) = exp(-z^2)/sqrt(pi) * 1/(z + (1/2)/(z + 1/(z + (3/2)/(z + ...))))
  const tiny = 1e-300;
  let f = z, C = z, D = 0;
  for (let k = 1; k < 500; k++) {
    const a = k / 2;
    D = z + a * D;
    D = D === 0 ? 1 / tiny : 1 / D;
    C = z + a / C;
    if (C === 0) C = tiny;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  // exp(-z^2) with z^2 split into an exact part and a small one (z*z itself
  // would lose ~1e-14 relative at z = 14)
  const zh = Math.round(z * 1048576) / 1048576, zl = z - zh;
  return (Math.exp(-zh * zh) * Math.exp(-(2 * zh * zl + zl * zl))) / Math.sqrt(Math.PI) / f;
}

export const UNARY = {
  neg: (x) => -x,
  exp: (x) => Math.exp(x),
  log: (x) => Math.log(x),
  softplus: (x) => (x > 20 ? x : Math.log1p(Math.exp(x))),
  silu: (x) => x / (1 + Math.exp(-x)),
  sigmoid: (x) => 1 / (1 + Math.exp(-x)),
  relu: (x) => (x > 0 ? x : 0),
  sqrt: (x) => Math.sqrt(x),
  rsqrt: (x) => 1 / Math.sqrt(x),
  square: (x) => x * x,
  tanh: (x) => Math.tanh(x),
  gelu: (x) => 0.5 * x * erfc(-x * Math.SQRT1_2),
  gelu_tanh: (x) => x / (1 + Math.exp(-2 * 0.7978845608028654 * (x + 0.044715 * x * x * x))),
};

// Applies `transform` to the f32 array `data` in place. The whole chain is
// checked before any element changes.
export function applyTransform(transform, data) {
  if (!transform) return data;
  const known = Object.keys(UNARY).join(', ');
  const ops = transform.split(',').map((name) => {
    if (!name) throw new Error(`transform "${transform}": empty op name (ops are separated by single commas; known: ${known})`);
    const f = UNARY[name];
    if (!f) throw new Error(`transform "${transform}": unknown transform op '${name}' (known: ${known})`);
    return f;
  });
  for (const f of ops) for (let i = 0; i < data.length; i++) data[i] = f(data[i]);
  return data;
}

// ---- 16-bit weights -------------------------------------------------------
// A bundle keeps its matmul and embed weights in f16 or bf16 (the weights
// pass); they are rounded from f32 to nearest even as ir/ir.c's
// ssm_f32_to_f16 / ssm_f32_to_bf16 do, and packed two to a u32 word (the
// kernels unpack them), the array padded to whole words.

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

export function f32ToBf16(x) {
  f32[0] = x;
  const b = u32[0];
  if ((b & 0x7fffffff) > 0x7f800000) return ((b >>> 16) | 0x40) & 0xffff; // quiet NaN
  return ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
}

export function f32ToF16(x) {
  f32[0] = x;
  const b = u32[0];
  const sign = (b >>> 16) & 0x8000;
  let ax = b & 0x7fffffff;
  if (ax > 0x7f800000) return sign | 0x7e00 | ((ax >>> 13) & 0x3ff);
  if (ax >= 0x477ff000) return sign | 0x7c00; // >= 65520 rounds to inf
  if (ax >= 0x38800000) { // normal in f16
    ax -= (127 - 15) << 23;
    ax += 0xfff + ((ax >>> 13) & 1);
    return sign | (ax >>> 13);
  }
  // subnormal or zero, in units of 2^-24, rounded to nearest even
  const e = ax >>> 23;
  const shift = 126 - e;
  if (e === 0 || shift >= 25) return sign;
  const mant = (ax & 0x7fffff) | 0x800000;
  let q = mant >>> shift;
  const r = mant & ((1 << shift) - 1), half = 1 << (shift - 1);
  if (r > half || (r === half && (q & 1))) q++;
  return sign | q;
}

// ---- quantized weights ---------------------------------------------------
// ir/ir.h's ssm_qlayout: a row (the last dim, k values) in blocks of 32,
// each with a scale d, an f16, an element standing for q * d. Every q in
// element order (q8_0: an int8; q4_0: the 4 bits of q + 8, element e in
// bits 4 * (e % 2) of byte e / 2), then from a 4-byte boundary each block's
// d as f16. q8_0: q = round(w * (1 / d)) in [-127, 127], d = amax / 127
// rounded up to 4 significant bits (f16Up4). q4_0: q in [-8, 7], d the
// best of 9 candidates (q4Scale). The same bytes as ssm_quantize (f32
// arithmetic, roundf).

export function qLayout(shape, dtype = 'q8_0') {
  const k = shape.length ? shape[shape.length - 1] : 1;
  const n = shape.reduce((a, d) => a * d, 1);
  const rows = k ? n / k : 0, blocks = Math.ceil(k / 32);
  const scales = ((dtype === 'q4_0' ? Math.ceil(n / 2) : n) + 3) & ~3;
  return { k, rows, blocks, scales, bytes: scales + ((rows * blocks * 2 + 3) & ~3) };
}

// v rounded half away from zero (roundf), clamped to [lo, hi]
function roundClamp(v, lo, hi) {
  return Math.max(lo, Math.min(hi, Math.sign(v) * Math.round(Math.abs(v))));
}

// x rounded to nearest even at 8 significant bits (ir/ir.c's round8)
function round8(x) {
  f32[0] = x;
  u32[0] = ((u32[0] + 0x7fff + ((u32[0] >>> 16) & 1)) & 0xffff0000) >>> 0;
  return f32[0];
}

// q4_0's d of data[k0..k1) as f16 bits (ir/ir.c's q4_scale)
function q4Scale(data, k0, k1) {
  let m = 0, best = 0, bestErr = Infinity;
  for (let i = k0; i < k1; i++) if (Math.abs(data[i]) > Math.abs(m)) m = data[i];
  for (let t = -4; t <= 4 && m !== 0; t++) {
    const dh = f32ToF16(round8(Math.fround(m / Math.fround(-8 + Math.fround(t / 10)))));
    const d = f16ToF32(dh), id = d !== 0 ? Math.fround(1 / d) : 0;
    if (!Number.isFinite(d)) return dh;
    let err = 0;
    for (let i = k0; i < k1; i++) {
      const e = Math.fround(data[i] - Math.fround(roundClamp(Math.fround(data[i] * id), -8, 7) * d));
      err = Math.fround(err + Math.fround(e * e));
    }
    if (err < bestErr) { bestErr = err; best = dh; }
  }
  return best;
}

export function toQuant(data, shape, dtype = 'q8_0') {
  const l = qLayout(shape, dtype), q4 = dtype === 'q4_0';
  const out = new Uint8Array(l.bytes);
  const d16 = new DataView(out.buffer);
  for (let r = 0; r < l.rows; r++)
    for (let b = 0; b < l.blocks; b++) {
      const k0 = r * l.k + b * 32, k1 = r * l.k + Math.min((b + 1) * 32, l.k);
      let amax = 0;
      for (let i = k0; i < k1; i++) {
        if (!Number.isFinite(data[i])) throw new Error(`element ${i} (${data[i]}) cannot be held in ${dtype}`);
        amax = Math.max(amax, Math.abs(data[i]));
      }
      const dh = q4 ? q4Scale(data, k0, k1) : f16Up4(Math.fround(amax / 127));
      const d = f16ToF32(dh);
      if (!Number.isFinite(d)) throw new Error(`element ${k0}: its block's scale overflows f16 in ${dtype}`);
      d16.setUint16(l.scales + (r * l.blocks + b) * 2, dh, true);
      const id = d !== 0 ? Math.fround(1 / d) : 0;
      for (let i = k0; i < k1; i++) {
        const v = Math.fround(data[i] * id);
        if (!q4) {
          out[i] = roundClamp(v, -127, 127) & 0xff;
          continue;
        }
        const u = roundClamp(v, -8, 7) + 8, sh = (i & 1) * 4;
        out[i >> 1] = (out[i >> 1] & ~(0xf << sh)) | (u << sh);
      }
    }
  return out;
}

// x >= 0 rounded up to 4 significant bits, as f16 bits (ir/ir.c's f16_up4)
function f16Up4(x) {
  if (x < 2 ** -21) return Math.ceil(x * 2 ** 24);
  f32[0] = x;
  if (u32[0] & 0xfffff) u32[0] = ((u32[0] | 0xfffff) + 1) >>> 0;
  return f32ToF16(f32[0]);
}

function f16ToF32(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >>> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

// f32 values as `dtype` ('f16' or 'bf16') words: a Uint16Array of even length.
export function toHalf(dtype, data) {
  const round = dtype === 'bf16' ? f32ToBf16 : dtype === 'f16' ? f32ToF16 : null;
  if (!round) throw new Error(`no 16-bit dtype '${dtype}'`);
  const out = new Uint16Array(data.length + (data.length & 1));
  for (let i = 0; i < data.length; i++) out[i] = round(data[i]);
  return out;
}
