// helpers.mjs — what the WebGPU host's test suites share: where the tree and
// the ssmc binary are (ctest passes SSMC), a private XDG_RUNTIME_DIR and
// SwiftShader's Vulkan driver for Dawn (it refuses Mesa 22's lavapipe),
// compiling fixtures, and the transformers goldens of tests/data.

import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const WEB = join(ROOT, 'runtime/web');
export const SSMC = process.env.SSMC ?? join(ROOT, 'build/ssmc');
// test artifacts (the browser test's screenshot) go next to the binary
export const ARTIFACTS = process.env.SSMC_ARTIFACTS ?? join(dirname(SSMC), 'web-artifacts');
const SWIFTSHADER = '/usr/lib/chromium/vk_swiftshader_icd.json';

if (!process.env.XDG_RUNTIME_DIR || !existsSync(process.env.XDG_RUNTIME_DIR))
  process.env.XDG_RUNTIME_DIR = mkdtempSync(join(tmpdir(), 'ssmc-xdg-'));
if (!process.env.VK_ICD_FILENAMES && existsSync(SWIFTSHADER)) process.env.VK_ICD_FILENAMES = SWIFTSHADER;

if (!existsSync(SSMC)) throw new Error(`no ssmc binary at ${SSMC} (build first, or set SSMC)`);

export function scratch(prefix = 'ssmc-web-') {
  return mkdtempSync(join(tmpdir(), prefix));
}

// ssmc with `args`; its stdout. Throws with stderr on failure.
export function ssmc(args, options = {}) {
  return execFileSync(SSMC, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options });
}

// Compiles `model` (a directory or YAML) into dir/name.ssmb.
export function compile(model, dir, name, args = []) {
  const out = join(dir, `${name}.ssmb`);
  ssmc(['compile', model, '-o', out, ...args]);
  return out;
}

// The fixtures of tests/data that have transformers goldens.
export function fixtures() {
  const data = join(ROOT, 'tests/data');
  return readdirSync(data).filter((d) => existsSync(join(data, d, 'golden.json'))).sort();
}

// prompt, generated ids, rows x vocab logits of transformers, max |logit|.
export function golden(name) {
  const dir = join(ROOT, 'tests/data', name);
  const g = JSON.parse(readFileSync(join(dir, 'golden.json'), 'utf8'));
  const buf = readFileSync(join(dir, 'logits.f32'));
  const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
  if (logits.length !== g.rows * g.vocab || g.rows !== g.prompt.length + g.generated.length - 1)
    throw new Error(`fixture ${name}: logits.f32 does not hold rows x vocab floats`);
  let maxAbs = 0;
  for (const v of logits) maxAbs = Math.max(maxAbs, Math.abs(v));
  // transformers run in bf16: its distance from the f32 logits, the scale
  // of a 16-bit bundle's bounds (boundOf, sameBound)
  const dBf16 = g.half?.bf16?.native_max_abs_diff_vs_f32;
  return { dir, prompt: g.prompt, generated: g.generated, rows: g.rows, vocab: g.vocab, logits, maxAbs,
           dBf16 };
}

// tests/test_golden.c's bounds, relative to the largest logit. Against
// transformers' f32 logits: 1e-4 for f32 weights; for 16-bit weights,
// whose matmuls take x at f16's precision, 1.5 times transformers-bf16's
// distance from them.
export function boundOf(g, half) {
  if (!half) return 1e-4;
  if (!(g.dBf16 > 0)) throw new Error('the fixture has no bf16 reference (tools/gen_half_refs.py)');
  return 1.5 * g.dBf16 / g.maxAbs;
}

// Between two runs of one bundle that sum in different orders: `f32` for
// f32 weights; with 16-bit weights a rounding of x can fall either side of
// its boundary where the runs differ in the last bit, so a tenth of that
// distance.
export function sameBound(g, half, f32) {
  return half ? g.dBf16 / 10 / g.maxAbs : f32;
}

// max over every row of max |a - ref| / scale (tests/test_golden.c's criterion)
export function relErr(rows, ref, vocab, scale) {
  let worst = 0;
  rows.forEach((r, i) => {
    for (let v = 0; v < vocab; v++) worst = Math.max(worst, Math.abs(r[v] - ref[i * vocab + v]) / scale);
  });
  return worst;
}
