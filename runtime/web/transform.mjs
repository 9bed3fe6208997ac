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
