// transform.test.mjs — the WebGPU host's load-time weight transforms
// (transform.mjs) are the CPU interpreter's: every unary op of ir/ops.def
// has an entry, and each gives the value of its C expression in
// ir/elementwise.def (read from the file and evaluated here in double, as C
// does) at points across its range, stored as f32.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ROOT } from './helpers.mjs';
import { UNARY, applyTransform } from '../transform.mjs';

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
  const js = c.replace(/\b(exp|log1p|log|sqrt|tanh)\(/g, 'Math.$1(');
  return new Function('x', `return ${js};`);
}

test('every unary op of elementwise.def has a transform with its C value', () => {
  const r = rows();
  assert.ok(r.length >= 11, `only ${r.length} UNARY rows read`);
  const points = [-30, -20.5, -1, -1e-3, 0, 1e-3, 0.5, 1, 2.5, 19.9, 20, 20.1, 30, 88];
  for (const { name, c } of r) {
    assert.ok(name && UNARY[name], `unary op '${name}' (${c}) has no transform`);
    const ref = fromC(c);
    for (const x of points) {
      const want = Math.fround(ref(x)), got = Math.fround(UNARY[name](x));
      assert.ok(Object.is(want, got) || (Number.isNaN(want) && Number.isNaN(got)), `${name}(${x}): ${got}, C gives ${want}`);
    }
  }
  assert.equal(Object.keys(UNARY).length, r.length, 'a transform for an op that is not in elementwise.def');
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
