// transform.test.mjs — the WebGPU host's load-time weight transforms
// (transform.mjs) are the CPU interpreter's: every unary op of ir/ops.def
// has an entry, and each gives the value of its C expression in
// ir/elementwise.def (read from the file and evaluated here in double, as C
// does) at points across its range, stored as f32. 16-bit weights are
// rounded to nearest even, like ir/ir.c.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers.mjs';
import { UNARY, applyTransform, erfc, f32ToBf16, f32ToF16, qLayout, toHalf, toQuant } from '../transform.mjs';

// UNARY(ENUM, c, glsl, wgsl) rows: the op's name (ops.def) and its C expression.
function rows() {
  const def = readFileSync(join(ROOT, 'ir/elementwise.def'), 'utf8');
  const ops = readFileSync(join(ROOT, 'ir/ops.def'), 'utf8');
  const out = [];
  for (const m of def.matchAll(/^UNARY\((\w+),\s*(.*?),\s*"[^"]*",\s*"[^"]*"\)\s*$/gm)) {
    const name = new RegExp(`^X\\(${m[1]},\\s*"(\\w+)"`, 'm').exec(ops)?.[1];
    out.push({ name, c: m[2] });
  }
  return out;
}

// A C expression over x (elementwise.def's column) as a JavaScript function.
function fromC(c) {
  const js = c.replace(/\b(exp|log1p|log|sqrt|tanh)\(/g, 'Math.$1(').replace(/\bM_SQRT1_2\b/g, 'Math.SQRT1_2');
  return new Function('x', 'erfc', `return ${js};`).bind(null);
}

test('every unary op of elementwise.def has a transform with its C value', () => {
  const r = rows();
  assert.ok(r.length >= 11, `only ${r.length} UNARY rows read`);
  const points = [-30, -20.5, -1, -1e-3, 0, 1e-3, 0.5, 1, 2.5, 19.9, 20, 20.1, 30, 88];
  for (const { name, c } of r) {
    assert.ok(name && UNARY[name], `unary op '${name}' (${c}) has no transform`);
    const f = fromC(c), ref = (x) => f(x, erfc);
    for (const x of points) {
      const want = Math.fround(ref(x)), got = Math.fround(UNARY[name](x));
      assert.ok(Object.is(want, got) || (Number.isNaN(want) && Number.isNaN(got)), `${name}(${x}): ${got}, C gives ${want}`);
    }
  }
  assert.equal(Object.keys(UNARY).length, r.length, 'a transform for an op that is not in elementwise.def');
});

test("erfc gives C's values (glibc, via Python's math.erfc)", () => {
  const want = [[0.5, 0.4795001221869535], [1, 0.15729920705028513], [3, 2.2090496998585438e-05],
    [10, 2.088487583762545e-45], [0.7071067811865476, 0.31731050786291404],
    [14.142135623730951, 5.507248237212385e-89], [21.213203435596427, 9.813427854296048e-198],
    [-1.7677669529663687, 1.9875806693484477], [0, 1]];
  for (const [z, e] of want) {
    const got = erfc(z);
    assert.ok(Math.abs(got - e) <= 2e-15 * Math.abs(e), `erfc(${z}): ${got}, C gives ${e}`);
    assert.ok(Object.is(Math.fround(got), Math.fround(e)), `erfc(${z}) as f32`);
  }
});

test('a chain applies in order, each step stored as f32; bad chains change nothing', () => {
  const a = Float32Array.of(0.5, -2, 3);
  applyTransform('exp,neg', a);
  assert.deepEqual([...a], [0.5, -2, 3].map((x) => Math.fround(-Math.fround(Math.exp(x)))));
  const b = Float32Array.of(1, 2);
  assert.throws(() => applyTransform('exp,nope', b), /transform "exp,nope": unknown transform op 'nope' \(known: neg, exp/);
  assert.throws(() => applyTransform('exp,,neg', b), /empty op name/);
  assert.deepEqual([...b], [1, 2]);
});

// What a 16-bit word means (safetensors.mjs reads checkpoints the same way).
function f16Value(h) {
  const s = h & 0x8000 ? -1 : 1, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  if (e === 0) return s * m * 2 ** -24;
  if (e === 31) return m ? NaN : s * Infinity;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}
function bf16Value(h) {
  return new Float32Array(new Uint32Array([h << 16]).buffer)[0];
}

test('16-bit weights are rounded to nearest even, as ir/ir.c does', () => {
  const f16 = [[1, 0x3c00], [-2, 0xc000], [65504, 0x7bff], [65519.99, 0x7bff], [65520, 0x7c00],
    [-1e6, 0xfc00], [Infinity, 0x7c00], [2 ** -14, 0x0400], [2 ** -24, 0x0001], [2 ** -25, 0],
    [1.5 * 2 ** -25 * 2, 0x0002], [1.25 * 2 ** -24, 0x0001], [1.5 * 2 ** -24, 0x0002], [1e-10, 0],
    [-0, 0x8000], [1 + 2 ** -11, 0x3c00], [1 + 3 * 2 ** -11, 0x3c02], [(1023.5 / 1024) * 2 ** -14, 0x0400]];
  for (const [x, h] of f16) assert.equal(f32ToF16(x), h, `f16(${x})`);
  assert.equal(f32ToF16(NaN) & 0x7e00, 0x7e00);
  const bf16 = [[1, 0x3f80], [1 + 2 ** -8, 0x3f80], [1 + 3 * 2 ** -8, 0x3f82], [-0.5, 0xbf00], [Infinity, 0x7f80]];
  for (const [x, h] of bf16) assert.equal(f32ToBf16(x), h, `bf16(${x})`);
  assert.ok(Number.isNaN(bf16Value(f32ToBf16(NaN))));
  // random f32 of every magnitude: the word is a nearest one, ties to even
  let seed = 12345;
  const rnd = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
  for (let i = 0; i < 20000; i++) {
    const x = Math.fround((rnd() - 0.5) * 2 ** Math.floor(rnd() * 50 - 30));
    for (const [round, value] of [[f32ToF16, f16Value], [f32ToBf16, bf16Value]]) {
      const h = round(x), d = Math.abs(value(h) - x);
      if (!Number.isFinite(value(h))) continue;
      for (const n of [h - 1, h + 1]) {
        if ((n & 0x7fff) > 0x7bff && value === f16Value) continue;
        const dn = Math.abs(value(n & 0xffff) - x);
        if ((n & 0x7fff) === 0x7fff || (h & 0x7fff) === 0) continue; // across the sign
        assert.ok(d < dn || (d === dn && !(h & 1)), `${value === f16Value ? 'f16' : 'bf16'}(${x}) = ${h.toString(16)}`);
      }
    }
  }
  const packed = toHalf('bf16', Float32Array.of(1, -0.5, 2));
  assert.deepEqual([...packed], [0x3f80, 0xbf00, 0x4000, 0]);
  assert.throws(() => toHalf('f32', Float32Array.of(1)), /no 16-bit dtype 'f32'/);
});

// q8_0 as tests/test_ir.c's q8_0 has it: the layout of a [3, 40] weight,
// d rounded up to 4 significant bits, the int8s, zeros, and the refusals.
test('q8_0: the bytes of ssm_quantize', () => {
  const l = qLayout([3, 40]);
  assert.deepEqual(l, { k: 40, rows: 3, blocks: 2, scales: 120, bytes: 132 });
  const w = new Float32Array(120);
  for (let k = 0; k < 40; k++) w[k] = k - 20;
  w[40] = 1 / 3;
  w[72] = -0.5;
  const q = toQuant(w, [3, 40]);
  const v = new DataView(q.buffer), i8 = new Int8Array(q.buffer);
  assert.equal(q.length, 132);
  assert.equal(v.getUint16(120, true), f32ToF16(0.171875));
  assert.equal(v.getUint16(122, true), f32ToF16(0.15625));
  assert.deepEqual([i8[0], i8[10], i8[39], i8[40], i8[72]], [-116, -58, 122, 124, -114]);
  for (let k = 80; k < 120; k++) assert.equal(i8[k], 0);
  assert.equal(v.getUint16(124 + 4, true), 0);
  w[45] = NaN;
  assert.throws(() => toQuant(w, [3, 40]), /element 45 \(NaN\) cannot be held in q8_0/);
  w[45] = 0;
  w[90] = 1e7;
  assert.throws(() => toQuant(w, [3, 40]), /element 80: its block's scale overflows f16/);
});

// q4_0 as tests/test_ir.c's q4_0 has it: a [3, 41] weight (rows sharing a
// byte), the scales the search picks, the nibbles, zeros, and the refusals.
test('q4_0: the bytes of ssm_quantize', () => {
  const l = qLayout([3, 41], 'q4_0');
  assert.deepEqual(l, { k: 41, rows: 3, blocks: 2, scales: 64, bytes: 76 });
  const w = new Float32Array(123);
  for (let k = 0; k < 41; k++) w[k] = k - 20;
  w[41] = Math.fround(1 / 3);
  w[73] = -0.5;
  const q = toQuant(w, [3, 41], 'q4_0');
  const v = new DataView(q.buffer);
  assert.equal(q.length, 76);
  const d = [0, 1, 2, 3, 4, 5].map((j) => v.getUint16(64 + 2 * j, true));
  assert.deepEqual(d, [2.375, -2.4375, -0.041748046875, 0.0625, 0, 0].map(f32ToF16));
  assert.deepEqual([...q.subarray(0, 4)], [0x00, 0x10, 0x21, 0x32]);
  assert.deepEqual([q[20], q[21], q[62], q[63]], [0x00, 0x88, 0, 0]);
  w[45] = NaN;
  assert.throws(() => toQuant(w, [3, 41], 'q4_0'), /element 45 \(NaN\) cannot be held in q4_0/);
  w[45] = 0;
  w[90] = 1e6;
  assert.throws(() => toQuant(w, [3, 41], 'q4_0'), /element 82: its block's scale overflows f16 in q4_0/);
});
