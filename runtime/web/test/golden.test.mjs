// golden.test.mjs — every fixture of tests/data through the WebGPU host on
// Dawn (SwiftShader without a GPU), against Hugging Face transformers, with
// tests/test_golden.c's tolerances: max |Δlogit| / max |logit| <= 1e-4 at
// every position, the same greedy tokens, and prefill in chunks (bundles
// of 4-token prefill programs) equal to token-by-token decode (1-token
// programs) to 1e-6; a 16-bit bundle, whose matmuls take x at f16's
// precision, within its bounds (helpers.mjs: boundOf, sameBound). Every
// kernel's WGSL must compile in Dawn: opening the
// runtime compiles them all and fails with Dawn's messages (getCompilationInfo)
// naming the kernel. 16-bit checkpoints give 16-bit bundles (their weights
// unpacked from u32 words). Decoding runs with the argmax on the host and
// with the sampler on the device feeding each token back.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { boundOf, compile, fixtures, golden, relErr, sameBound, scratch, ssmc } from './helpers.mjs';
import { readBundle } from '../bundle.mjs';
import { openCheckpoint } from '../safetensors.mjs';
import { Runtime } from '../gpu.mjs';
import { Session } from '../session.mjs';
import { nodeGpu, dirFiles } from '../node.mjs';

const dir = scratch();
// qwen3_5_long (a 300-token prompt) has a test of its own, at the end
const names = fixtures().filter((n) => n !== 'qwen3_5_long');

// Opens `bundlePath` on the fixture's weights; generates greedily (on the
// host, or on the device) with every position's logits kept; then `also`
// (when given) on the same runtime.
async function runFixture(bundlePath, g, hostGreedy, also) {
  const gpu = await nodeGpu();
  const bundle = readBundle(readFileSync(bundlePath), bundlePath);
  const checkpoint = await openCheckpoint(dirFiles(g.dir), g.dir);
  const rt = await Runtime.open({ gpu, bundle, checkpoint });
  await checkpoint.close();
  try {
    const rows = [];
    const ids = await new Session(rt).generate(g.prompt, g.generated.length, {
      hostGreedy, onLogits: (r) => void rows.push(Float32Array.from(r)) });
    assert.equal(rt.position, g.prompt.length + g.generated.length - 1);
    if (also) await also(rt);
    return { ids, rows };
  } finally {
    rt.destroy();
  }
}

test('the fixtures are all there', () => {
  assert.ok(names.length >= 10, `only ${names.length} fixtures with golden.json`);
  for (const n of ['mamba1_tiny', 'falcon_tiny', 'mamba2_groups', 'jamba_gqa', 'mamba1_f16_sharded'])
    assert.ok(names.includes(n), n);
});

// the fixtures with 16-bit checkpoints (the bundle keeps their dtype)
const SIXTEEN_BIT = { falcon_bf16_untied: 'bf16', jamba_gqa: 'bf16', mamba1_f16_sharded: 'f16' };

// transformers' greedy tokens under a repetition penalty
// (tools/gen_penalty_golden.py: penalty.json), drawn on the device (the seen
// tokens on the GPU), and on the host for one penalty.
const PENALTY = ['mamba1_tiny'];
function penaltyRuns(g) {
  return async (rt) => {
    const pen = JSON.parse(readFileSync(join(g.dir, 'penalty.json'), 'utf8'));
    assert.ok(rt.m.decode.hasSeen && pen.runs.length >= 2);
    for (const run of pen.runs)
      for (const hostGreedy of run === pen.runs[0] ? [false, true] : [false]) {
        await rt.reset();
        const ids = await new Session(rt).generate(pen.prompt, run.generated.length,
                                                   { hostGreedy, repeatPenalty: run.repetition_penalty });
        assert.deepEqual(ids, run.generated, `penalty ${run.repetition_penalty}${hostGreedy ? ', host' : ''}: ` +
                         `generated ${ids}, transformers ${run.generated}`);
      }
  };
}

// Open items, reported as todo until fixed (every other fixture must pass).
const OPEN = {};

for (const name of names) {
  const todo = OPEN[name];
  test(`${name}: WGSL compiles, logits and greedy tokens match transformers`, { todo }, async (t) => {
    const g = golden(name);
    assert.ok(g.maxAbs > 0.5, 'the fixture must not be a near-zero model');
    let chunked;
    try {
      chunked = compile(g.dir, dir, `${name}.c4`, ['--chunk', '4']);
    } catch (e) {
      // fixtures of families that have no YAML yet (test_golden.c skips them too)
      if (!/model_type '\w+' is not supported/.test(e.stderr ?? '')) throw e;
      t.skip(`no YAML for its family yet: ${e.stderr.trim()}`);
      return;
    }
    const stepwise = compile(g.dir, dir, `${name}.c1`, ['--chunk', '1']);
    // a 16-bit checkpoint compiles to a 16-bit bundle: the kernels unpack
    // its matmul and embed weights from u32 words
    const dtype = readBundle(readFileSync(chunked), chunked).manifest.dtype;
    assert.equal(dtype, SIXTEEN_BIT[name] ?? 'f32');
    if (dtype !== 'f32')
      assert.ok(readBundle(readFileSync(chunked), chunked).manifest.weights.some((w) => w.dtype === dtype));
    const a = await runFixture(chunked, g, true, PENALTY.includes(name) ? penaltyRuns(g) : null);
    // token by token with every step's logits (a step a submission), then
    // without them: steps queued together, the ids and positions fed on the device
    const s = await runFixture(stepwise, g, false, async (rt) => {
      await rt.reset();
      const ids = await new Session(rt).generate(g.prompt, g.generated.length);
      assert.deepEqual(ids, g.generated, `device sampler, steps queued together: generated ${ids}`);
    });
    const half = dtype !== 'f32';
    for (const [how, r] of [['chunked, host greedy', a], ['token by token, device sampler', s]]) {
      assert.deepEqual(r.ids, g.generated, `${how}: generated ${r.ids}, transformers ${g.generated}`);
      assert.equal(r.rows.length, g.rows);
      const e = relErr(r.rows, g.logits, g.vocab, g.maxAbs);
      assert.ok(e <= boundOf(g, half), `${how}: max rel err vs transformers ${e}`);
    }
    const flat = new Float32Array(g.rows * g.vocab);
    a.rows.forEach((r, i) => flat.set(r, i * g.vocab));
    const e = relErr(s.rows, flat, g.vocab, g.maxAbs);
    assert.ok(e <= sameBound(g, half, 1e-6), `prefill vs decode differ by ${e}`);
  });
}

// The window split: with 64 KiB windows the lm_head's slot (the tied
// embedding and the final norm) is bound as 8 windows, picked by index in
// the generated accessors; the logits still match transformers. And fusion
// off, which runs the pointwise and row-reduction kernels.
for (const [name, args, what] of [
  ['mamba1_tiny', ['--chunk', '4', '--wgsl-window', '65536'], 'split into 64 KiB windows'],
  ['falcon_tiny', ['--chunk', '4', '--no-fuse'], 'unfused'],
  ['jamba_gqa', ['--chunk', '4', '--no-fuse'], 'unfused'],
]) {
  test(`${name} ${what}: logits and greedy tokens match transformers`, async () => {
    const g = golden(name);
    const b = compile(g.dir, dir, `${name}.${what.replace(/\W/g, '')}`, args);
    const m = readBundle(readFileSync(b), b).manifest;
    if (what.startsWith('split')) assert.equal(Math.max(...m.kernels.flatMap((k) => k.windows)), 8);
    const r = await runFixture(b, g, true);
    assert.deepEqual(r.ids, g.generated);
    const e = relErr(r.rows, g.logits, g.vocab, g.maxAbs);
    assert.ok(e <= boundOf(g, m.dtype !== 'f32'), `max rel err vs transformers ${e}`);
  });
}

// Prefill programs of 9 tokens, whose matmuls are the tiled gemm kernel
// (more than 8 rows): a prompt of 9 to 11 tokens runs one chunk, f32, bf16
// and f16 weights, a Mamba-2 and a hybrid with attention; the logits match
// transformers to 1e-4 and token-by-token decode to 1e-6, the hybrid to
// 1e-5 (test_golden.c's gemm_chunks says why: its gap at this chunk is as
// large with the matmul template in place of the gemm); 16-bit bundles
// within their bounds.
for (const [name, vsDecode] of [['mamba1_untied', 1e-6], ['falcon_bf16_untied', 1e-6],
                                ['mamba1_f16_sharded', 1e-6], ['mamba2_groups', 1e-6], ['jamba_gqa', 1e-5]]) {
  test(`${name} chunks of 9 (gemm): logits match transformers and decode`, async () => {
    const g = golden(name);
    assert.ok(g.prompt.length >= 9, `a prompt of ${g.prompt.length} tokens runs no chunk of 9`);
    const b9 = compile(g.dir, dir, `${name}.gemm9`, ['--chunk', '9']);
    const m9 = readBundle(readFileSync(b9), b9).manifest;
    assert.ok(m9.kernels.some((k) => k.family === 'gemm'));
    const half = m9.dtype !== 'f32';
    const c9 = await runFixture(b9, g, true);
    const c1 = await runFixture(compile(g.dir, dir, `${name}.gemm1`, ['--chunk', '1']), g, true);
    assert.deepEqual(c9.ids, g.generated);
    const e = relErr(c9.rows, g.logits, g.vocab, g.maxAbs);
    assert.ok(e <= boundOf(g, half), `max rel err vs transformers ${e}`);
    const flat = new Float32Array(g.rows * g.vocab);
    c1.rows.forEach((r, i) => flat.set(r, i * g.vocab));
    const d = relErr(c9.rows, flat, g.vocab, g.maxAbs);
    assert.ok(d <= sameBound(g, half, vsDecode), `prefill vs decode differ by ${d}`);
  });
}

// The Gated DeltaNet fixtures with prefill programs of 8, 16 and 64 tokens,
// whose delta rules are the chunked kernel (codegen/delta.c) while decode
// keeps the step-by-step one, and of 7 (below KNOB_DELTA_MIN_TOKENS: the
// step-by-step kernel; the prompt a full run and a partial one): the same
// greedy tokens as transformers, logits within 1e-4 of its and within 1e-5
// of token-by-token decode (test_golden.c's delta_chunks and
// delta_family_chunks).
for (const name of ['qwen3_5_tiny', 'qwen3_next_tiny', 'olmo_hybrid_tiny']) {
  test(`${name} chunks of 7, 8, 16 and 64 (chunked delta rule): logits match transformers and decode`, async () => {
    const g = golden(name);
    const c1 = await runFixture(compile(g.dir, dir, `${name}.delta1`, ['--chunk', '1']), g, true);
    const flat = new Float32Array(g.rows * g.vocab);
    c1.rows.forEach((r, i) => flat.set(r, i * g.vocab));
    for (const chunk of [7, 8, 16, 64]) {
      const b = compile(g.dir, dir, `${name}.delta${chunk}`, ['--chunk', String(chunk)]);
      const families = readBundle(readFileSync(b), b).manifest.kernels.map((k) => k.family);
      assert.equal(families.includes('delta_chunk'), chunk >= 8, `delta_chunk kernels at chunk ${chunk}`);
      assert.ok(families.includes('delta'), `no step-by-step delta kernel for decode`);
      const r = await runFixture(b, g, true);
      assert.deepEqual(r.ids, g.generated);
      const e = relErr(r.rows, g.logits, g.vocab, g.maxAbs);
      assert.ok(e <= boundOf(g, false), `chunk ${chunk}: max rel err vs transformers ${e}`);
      const d = relErr(r.rows, flat, g.vocab, g.maxAbs);
      assert.ok(d <= 1e-5, `chunk ${chunk}: prefill vs decode differ by ${d}`);
    }
  });
}

// A 300-token prompt through Qwen3.5's Gated DeltaNet at prefill chunks of
// 7 (step by step), 64 and the default (the chunked form over several of its
// chunks): transformers' greedy tokens and logits within 1e-4 of its largest
// at every position (test_golden.c's delta_long).
test('qwen3_5_long: a 300-token prompt at chunks of 7, 64 and the default matches transformers', async () => {
  const g = golden('qwen3_5_long');
  assert.equal(g.prompt.length, 300);
  for (const chunk of [null, 7, 64]) {
    const b = compile(g.dir, dir, `long.${chunk ?? 'default'}`, chunk ? ['--chunk', String(chunk)] : []);
    const r = await runFixture(b, g, true);
    assert.deepEqual(r.ids, g.generated, `chunk ${chunk ?? 'default'}: generated ${r.ids}`);
    assert.equal(r.rows.length, g.rows);
    const e = relErr(r.rows, g.logits, g.vocab, g.maxAbs);
    assert.ok(e <= boundOf(g, false), `chunk ${chunk ?? 'default'}: max rel err vs transformers ${e}`);
  }
});

// A kernel that does not compile is refused when the runtime opens, with
// Dawn's message and the kernel's name.
test('WGSL that does not compile is an error naming the kernel', async () => {
  const g = golden('mamba1_tiny');
  const b = readBundle(readFileSync(compile(g.dir, dir, 'broken', ['--chunk', '4'])), 'broken.ssmb');
  const text = b.text;
  b.text = (blob) => (blob === b.manifest.kernels[2].wgsl ? text(blob).replace('fn main(', 'fn main(oops ') : text(blob));
  const checkpoint = await openCheckpoint(dirFiles(g.dir), g.dir);
  await assert.rejects(Runtime.open({ gpu: await nodeGpu(), bundle: b, checkpoint }),
                       /broken\.ssmb: kernel k2_gemv: WGSL does not compile: \d+:\d+: /);
  await checkpoint.close();
});

// A prefill run of fewer tokens than the chunk (tests/test_compile.c's
// partial_runs on WebGPU): the bundle's prefill runs take any count, a whole
// chunk and then a part of `tail` tokens give every row's logits as one
// token at a time through decode does, within f32 rounding, and leave the
// state so that the next token's logits agree too. A second whole chunk
// after a part must run all of its tokens again (the count in the uniform is
// set back). Chunk 64 has GEMMs of several row blocks, of which a short run
// skips all but the first; Mamba-2's chunked scan walks two chunks of 32
// tokens in WGSL (codegen/ssd.c), and a run of 40 a chunk and 8 tokens.
for (const [name, chunk, tails] of [['mamba1_tiny', 16, [2, 5, 15]], ['jamba_tiny', 16, [2, 15]],
                                    ['mamba2_tiny', 16, [5]], ['lfm2_tiny', 16, [5]],
                                    ['recurrent_gemma_tiny', 16, [5]], ['mamba1_tiny', 64, [5, 63]],
                                    ['mamba2_groups', 64, [40]]]) {
  test(`${name} chunk ${chunk}: runs of ${tails.join(', ')} tokens after a chunk match decode`, async () => {
    const g = golden(name);
    const bundle = readBundle(readFileSync(compile(g.dir, dir, `${name}.any${chunk}`, ['--chunk', String(chunk)])), name);
    assert.equal(bundle.manifest.prefill.anyCount, true);
    const checkpoint = await openCheckpoint(dirFiles(g.dir), g.dir);
    const rt = await Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint });
    await checkpoint.close();
    try {
      assert.equal(rt.anyCount, true);
      const V = rt.vocab;
      await assert.rejects(rt.run(new Array(chunk + 1).fill(0), true), /runs take 1 to \d+ tokens, not \d+/);
      for (const tail of tails) {
        const n = chunk + tail;
        const toks = Array.from({ length: 2 * chunk + tail + 1 }, (_, i) => (i * 37 + 11) % V);
        await rt.reset();
        const rows = [await rt.run(toks.slice(0, chunk), true), await rt.run(toks.slice(chunk, n), true),
                      await rt.run(toks.slice(n, n + chunk), true), await rt.run(toks.slice(n + chunk, n + chunk + 1), true)];
        assert.equal(rows[1].length, tail * V);
        assert.equal(rt.position, n + chunk + 1);
        const chunked = new Float32Array((n + chunk + 1) * V);
        let at = 0;
        for (const r of rows) { chunked.set(r, at); at += r.length; }
        await rt.reset();
        const single = new Float32Array((n + chunk + 1) * V);
        for (let i = 0; i <= n + chunk; i++) single.set(await rt.run([toks[i]], true), i * V);
        let big = 0, diff = 0;
        for (let i = 0; i < single.length; i++) {
          big = Math.max(big, Math.abs(single[i]));
          diff = Math.max(diff, Math.abs(chunked[i] - single[i]));
        }
        console.log(`# ${name}: ${chunk} + ${tail} + ${chunk} + 1 tokens: max |d| ${diff.toExponential(2)} of max |logit| ${big.toPrecision(3)}`);
        assert.ok(big > 0 && diff <= 1e-4 * big, `${chunk} + ${tail}: max |d| ${diff} of ${big}`);
      }
    } finally {
      rt.destroy();
    }
  });
}

// The prefill's logits of every row are a buffer of their own ('output'),
// made when a run first asks for them: runs without logits stop after the
// last step that writes state, and leave the next token's logits as runs
// with them do; the rows a run then asks for are decode's, token by token.
test('mamba1_tiny chunk 16: the prefill logits buffer is made when first asked for', async () => {
  const g = golden('mamba1_tiny');
  const bundle = readBundle(readFileSync(compile(g.dir, dir, 'mamba1_tiny.apart16', ['--chunk', '16'])), 'apart');
  const m = bundle.manifest;
  assert.equal(m.buffers[m.prefill.output.buffer].usage, 'output');
  assert.equal(m.buffers[m.decode.output.buffer].usage, 'activations');
  const checkpoint = await openCheckpoint(dirFiles(g.dir), g.dir);
  const rt = await Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint });
  await checkpoint.close();
  try {
    const V = rt.vocab, toks = Array.from({ length: 33 }, (_, i) => (i * 37 + 11) % V);
    assert.equal(rt.buffers[m.prefill.output.buffer], null);
    assert.equal(await rt.run(toks.slice(0, 16), false), null);
    assert.equal(await rt.run(toks.slice(16, 32), false), null);
    assert.equal(rt.buffers[m.prefill.output.buffer], null);
    const without = await rt.run([toks[32]], true);
    await rt.reset();
    await rt.run(toks.slice(0, 16), true);
    assert.notEqual(rt.buffers[m.prefill.output.buffer], null);
    const rows = await rt.run(toks.slice(16, 32), true);
    assert.deepEqual(await rt.run([toks[32]], true), without);
    await rt.reset();
    let big = 0, diff = 0;
    for (let i = 0; i < 32; i++) {
      const one = await rt.run([toks[i]], true);
      for (let v = 0; i >= 16 && v < V; v++) {
        big = Math.max(big, Math.abs(one[v]));
        diff = Math.max(diff, Math.abs(rows[(i - 16) * V + v] - one[v]));
      }
    }
    assert.ok(big > 0 && diff <= 1e-5 * big, `max |d| ${diff} of ${big}`);
  } finally {
    rt.destroy();
  }
});

// Quantized bundles (8- or 4-bit weights in blocks of 32, quantized by the
// host as it loads them: transform.mjs's toQuant): chunks of 9 (the GEMM)
// and greedy decode on Dawn give the CPU interpreter's greedy tokens, and
// its logits within the bound of two runs of a 16-bit bundle (the matmuls
// take x at f16's precision), as tests/test_golden.c's q8_0 and q4_0 ask of
// Vulkan.
for (const [name, dt] of [['mamba1_tiny', 'q8_0'], ['mamba2_groups', 'q8_0'], ['jamba_gqa', 'q8_0'],
                          ['lfm2_tiny', 'q8_0'], ['mamba2_groups', 'q4_0'], ['jamba_moe', 'q4_0']]) {
  test(`${name} ${dt}: WebGPU matches the CPU interpreter`, async () => {
    const g = golden(name);
    const b = compile(g.dir, dir, `${name}.${dt}`, ['--chunk', '9', '--dtype', dt]);
    const m = readBundle(readFileSync(b), b).manifest;
    assert.equal(m.dtype, dt);
    assert.ok(m.weights.some((w) => w.dtype === dt));
    const web = await runFixture(b, g, true);
    const dump = join(dir, `${name}.${dt}.cpu.f32`);
    const out = ssmc(['run', g.dir, '--backend', 'cpu', '--dtype', dt, '--no-cache', '-q', '--greedy',
                      '--tokens', g.prompt.join(','), '-n', String(g.generated.length), '--dump-logits', dump]);
    const ids = out.trim().split('\n').pop().split(',').map(Number);
    assert.deepEqual(web.ids, ids, `WebGPU generated ${web.ids}, the CPU ${ids}`);
    const buf = readFileSync(dump);
    const cpu = new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4);
    assert.equal(cpu.length, g.rows * g.vocab);
    const e = relErr(web.rows, cpu, g.vocab, g.maxAbs);
    console.log(`# ${name} ${dt}: WebGPU vs CPU ${e.toExponential(2)}`);
    assert.ok(e <= sameBound(g, true, 0), `WebGPU vs CPU ${e}`);
  });
}
