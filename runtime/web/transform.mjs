// transform.mjs — load-time weight transforms (runtime/weights/transform.c):
// a weight's `transform` is a comma-separated chain of unary ops of
// ir/ops.def ("exp,neg" is -exp(w)), applied once when the weight is loaded
// with the CPU interpreter's numerics: each op in double precision (the C
// column of ir/elementwise.def; JavaScript's Math is double), the result
// stored as f32. test/transform.test.mjs checks this table against
// elementwise.def.

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

// f32 values as `dtype` ('f16' or 'bf16') words: a Uint16Array of even length.
export function toHalf(dtype, data) {
  const round = dtype === 'bf16' ? f32ToBf16 : dtype === 'f16' ? f32ToF16 : null;
  if (!round) throw new Error(`no 16-bit dtype '${dtype}'`);
  const out = new Uint16Array(data.length + (data.length & 1));
  for (let i = 0; i < data.length; i++) out[i] = round(data[i]);
  return out;
}
