// cli.test.mjs — `node runtime/web/ssmc-web.mjs` keeps `ssmc run`'s contract:
// with --tokens the last stdout line is the generated ids, the same as ssmc's;
// --dump-logits writes the same rows (f32, one per position processed) as
// ssmc run --dump-logits, within 1e-5 of the Vulkan runtime's, through a
// temporary file so a failed run keeps the old one (made exclusively: a
// symlink planted at its name is not followed); --prompt prints the text
// and streams the same continuation as ssmc run; usage errors exit 2 and
// runtime errors 1, with a message; stderr has ssmc run's timing summary,
// line for line (--json: its keys; -q: none); generation_config.json gives
// the defaults it gives ssmc run. And a bundle that needs more of an
// adapter than it has is refused with the limit named.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, existsSync, readdirSync, readlinkSync, mkdirSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { compile, scratch, ssmc, ROOT, WEB, SSMC } from './helpers.mjs';
import { readBundle } from '../bundle.mjs';
import { Runtime, workgroupBytes } from '../gpu.mjs';
import { profileReport } from '../profile.mjs';
import { openCheckpoint } from '../safetensors.mjs';
import { dirFiles } from '../node.mjs';

const FIX = join(ROOT, 'tests/data/mamba1_tiny');
const dir = scratch();
const bundle = compile(FIX, dir, 'm1', ['--chunk', '4']);
const PROMPT = '852,328,421,145,37,285,697,882';
// a fake adapter's limits: enough for the bundles here
const ADAPTER_LIMITS = { maxBufferSize: 268435456, maxStorageBufferBindingSize: 134217728, maxStorageBuffersPerShaderStage: 8,
                         maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256,
                         minStorageBufferOffsetAlignment: 256, maxComputeWorkgroupStorageSize: 16384 };

function web(args, input) {
  const r = spawnSync(process.execPath, [join(WEB, 'ssmc-web.mjs'), ...args], { encoding: 'utf8', input });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function floats(path) {
  const b = readFileSync(path);
  return new Float32Array(b.buffer, b.byteOffset, b.byteLength / 4);
}

test('--tokens: the ids line and the logits rows of ssmc run, and its timing summary', () => {
  const w = web(['run', bundle, '--weights', FIX, '--tokens', PROMPT, '-n', '8', '--dump-logits', join(dir, 'web.f32')]);
  assert.equal(w.code, 0, w.err);
  const cr = spawnSync(SSMC, ['run', bundle, '--weights', FIX, '--tokens', PROMPT, '-n', '8', '--dump-logits', join(dir, 'vk.f32')],
                       { encoding: 'utf8' });
  assert.equal(cr.status, 0, cr.stderr);
  const c = cr.stdout;
  const lastLine = (s) => s.trimEnd().split('\n').pop();
  assert.equal(lastLine(w.out), lastLine(c));
  assert.equal(lastLine(w.out), '598,598,598,598,618,280,152,152'); // transformers' (golden.json)
  const a = floats(join(dir, 'web.f32')), b = floats(join(dir, 'vk.f32'));
  assert.equal(a.length, (8 + 8 - 1) * 1000);
  assert.equal(a.length, b.length);
  let worst = 0, scale = 0;
  for (let i = 0; i < b.length; i++) (scale = Math.max(scale, Math.abs(b[i]))), (worst = Math.max(worst, Math.abs(a[i] - b[i])));
  assert.ok(worst / scale <= 1e-5, `WebGPU vs Vulkan: ${worst / scale}`);
  assert.deepEqual(readdirSync(dir).filter((f) => f.includes('.tmp-')), []);
  // the timing summary on stderr: ssmc run's lines, with the same counts
  // (the last prompt token is the sampler's first input: 7 fed, 8 drawn),
  // and its line of the generation_config.json fields taken
  const shape = (t) => t.trimEnd().split('\n')
    .map((l) => l.replace(/[\d.]+ (s|tokens\/s)\b/g, 'X $1').replace(/^(device|backend): .*/, '$1'));
  assert.deepEqual(shape(w.err), shape(cr.stderr), `${w.err}\n---\n${cr.stderr}`);
  assert.deepEqual(shape(w.err).slice(3), ['prompt:     7 tokens, X s, X tokens/s', 'generation: 8 tokens, X s, X tokens/s',
                                           'defaults from generation_config.json: do_sample (options given override them)']);
  assert.match(w.err, /^device: {5}.+, WebGPU \(Dawn\), \w+ weights\nbackend: {4}webgpu: .+\nload: {7}\d+\.\d\d s\n/);
  // --greedy (the argmax on the host) gives the same ids; -q: no summary
  const g = web(['run', bundle, '--weights', FIX, '--tokens', PROMPT, '-n', '8', '--greedy', '-q']);
  assert.equal(lastLine(g.out), lastLine(c));
  assert.equal(g.err, '');
  // sampling is seeded: the same settings give the same ids on both runtimes;
  // --json: the summary as one JSON line with ssmc run --json's keys
  const s = ['--temperature', '0.8', '--top-k', '40', '--top-p', '0.9', '--seed', '7', '--json'];
  const ws = web(['run', bundle, '--weights', FIX, '--tokens', PROMPT, '-n', '8', ...s]);
  assert.equal(ws.code, 0, ws.err);
  const cs = spawnSync(SSMC, ['run', bundle, '--weights', FIX, '--tokens', PROMPT, '-n', '8', ...s], { encoding: 'utf8' });
  assert.equal(lastLine(ws.out), lastLine(cs.stdout));
  const j = JSON.parse(ws.err), cj = JSON.parse(cs.stderr);
  assert.deepEqual(Object.keys(j).sort(), Object.keys(cj).filter((k) => k !== 'cache_file').sort());
  for (const k of ['prompt_tokens', 'generated_tokens', 'dtype']) assert.equal(j[k], cj[k], k);
  assert.equal(j.backend, 'webgpu');
  assert.ok(j.generated_tokens_per_s > 0 && j.prompt_tokens_per_s > 0, JSON.stringify(j));
});

test('--prompt: the text, then the same streamed continuation as ssmc run', () => {
  const tok = join(ROOT, 'tests/data/tokenizer/neox/tokenizer.json');
  const args = ['--weights', FIX, '--tokenizer', tok, '--prompt', 'def f(x):', '-n', '12'];
  const w = web(['run', bundle, ...args]);
  assert.equal(w.code, 0, w.err);
  assert.ok(w.out.startsWith('def f(x):'));
  assert.equal(w.out, ssmc(['run', bundle, ...args]));
  const stdin = web(['run', bundle, ...args.slice(0, 4), '--prompt', '-', '-n', '12'], 'def f(x):');
  assert.equal(stdin.out, w.out);
});

// Without --weights, the weights directory the bundle records (as ssmc run)
test('--weights defaults to the directory the bundle records', () => {
  const w = web(['run', bundle, '--tokens', PROMPT, '-n', '8']);
  assert.equal(w.code, 0, w.err);
  assert.equal(w.out.trimEnd().split('\n').pop(), '598,598,598,598,618,280,152,152'); // transformers'
});

// generation_config.json in the weights directory gives the defaults that
// it gives ssmc run: the same ids and text, options overriding, and the
// same message for a malformed file
test("generation_config.json's defaults, as ssmc run takes them", () => {
  const m = join(dir, 'genconfig');
  mkdirSync(m);
  for (const f of ['config.json', 'model.safetensors']) symlinkSync(join(FIX, f), join(m, f));
  const config = (j) => writeFileSync(join(m, 'generation_config.json'), JSON.stringify(j));
  const lastLine = (s) => s.trimEnd().split('\n').pop();
  const both = (...args) => {
    const w = web(['run', bundle, '--weights', m, '-n', '12', ...args]);
    assert.equal(w.code, 0, w.err);
    const c = spawnSync(SSMC, ['run', bundle, '--weights', m, '-n', '12', ...args], { encoding: 'utf8' });
    assert.equal(c.status, 0, c.stderr);
    assert.equal(w.out, c.stdout);
    return w;
  };
  const ids = (...args) => lastLine(both('--tokens', PROMPT, '-q', ...args).out);
  config({});
  const greedy = ids(), hot = ids('--temperature', '0.8', '--top-k', '50', '--seed', '3');
  config({ repetition_penalty: 1.3 });
  const pen = ids();
  assert.notEqual(pen, greedy);
  assert.equal(ids('--repeat-penalty', '1'), greedy);
  assert.match(both('--tokens', PROMPT).err, /\ndefaults from generation_config.json: repetition_penalty \(/);
  config({ do_sample: true, temperature: 0.8 });
  assert.notEqual(hot, greedy);
  assert.equal(ids('--seed', '3'), hot);
  assert.equal(ids('--greedy'), greedy);
  assert.equal(ids('--temperature', '0'), greedy);
  // an eos_token_id list ends a text run at any of its ids
  const text = ['--tokenizer', join(ROOT, 'tests/data/tokenizer/neox/tokenizer.json'), '--prompt', 'def f(x):', '-q'];
  config({});
  const plain = both(...text).out;
  const drawn = lastLine(both('--tokens', ssmc(['tokenize', '--tokenizer', text[1], '--ids', 'def f(x):']).trim(), '-q').out)
    .split(',').map(Number);
  const k = drawn.findIndex((id, i) => i > 0 && !drawn.slice(0, i).includes(id));
  config({ eos_token_id: [0, drawn[k]] });
  const short = both(...text).out;
  assert.ok(short.length < plain.length && plain.startsWith(short.trimEnd()), `${short} / ${plain}`);
  assert.equal(both(...text, '--eos', '0').out, plain);
  for (const bad of [{ top_k: 2.5 }, { top_p: 0 }, { temperature: 'hot' }, { do_sample: 1 },
                     { eos_token_id: [2, 'x'] }, { eos_token_id: 1000 }, { repetition_penalty: -1 }, [1, 2]]) {
    config(bad);
    const w = web(['run', bundle, '--weights', m, '--tokens', '1']);
    const c = spawnSync(SSMC, ['run', bundle, '--weights', m, '--tokens', '1'], { encoding: 'utf8' });
    assert.equal(w.code, 1);
    assert.match(w.err, /generation_config.json: .*expected|not a JSON object/);
    assert.equal(w.err.replace('ssmc-web: ', ''), c.stderr.replace('ssmc: ', ''));
  }
});

test('errors: usage (status 2) and runtime (status 1) messages; a failed run keeps the old dump', () => {
  // a bundle compiled from its description alone records no weights
  const bare = join(dir, 'bare.ssmb');
  ssmc(['compile', join(ROOT, 'models/mamba1.yaml'), '--config', join(FIX, 'config.json'), '-o', bare, '--chunk', '4']);
  const usage = [
    [[], /usage:/],
    [['run', bare, '--tokens', '1'], /run: give --weights DIR \(\S+bare\.ssmb records no weights directory\)/],
    [['run', bundle, '--weights', FIX], /run: give --tokens IDS or --prompt TEXT/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--top-p', '0'], /--top-p: expected a number in \(0, 1\]/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--greedy', '--seed', '3'], /--greedy: cannot be combined/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--repeat-penalty', '0'], /--repeat-penalty: expected a number above 0/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--repeat-penalty', 'nan'], /--repeat-penalty: expected a number above 0/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--frobnicate'], /run: unknown option '--frobnicate'/],
    [['fly'], /unknown command 'fly'/],
  ];
  for (const [args, re] of usage) {
    const r = web(args);
    assert.equal(r.code, 2, `${args}: ${r.err}`);
    assert.match(r.err, re);
  }
  const old = join(dir, 'old.f32');
  writeFileSync(old, 'keep me');
  const runtime = [
    [['run', bundle, '--weights', FIX, '--tokens', '1,2,1000', '--dump-logits', old], /ssmc-web: token id 1000 out of range \[0, 1000\)/],
    [['run', bundle, '--weights', FIX, '--tokens', '1,x'], /--tokens: expected comma-separated token ids/],
    [['run', join(FIX, 'config.json'), '--weights', FIX, '--tokens', '1'], /not an ssmc bundle/],
    [['run', bundle, '--weights', join(dir, 'nowhere'), '--tokens', '1'], /no model.safetensors or model.safetensors.index.json/],
    [['run', bundle, '--weights', FIX, '--prompt', 'hi'], /--prompt needs a tokenizer/],
    [['run', bundle, '--weights', FIX, '--tokens', '1', '--dump-logits', join(dir, 'no/such/dir/x.f32')], /--dump-logits .*no\/such\/dir/],
  ];
  for (const [args, re] of runtime) {
    const r = web(args);
    assert.equal(r.code, 1, `${args}: ${r.err}`);
    assert.match(r.err, re);
  }
  assert.equal(readFileSync(old, 'utf8'), 'keep me');
  assert.ok(!existsSync(join(dir, 'no')));
});

test("a batched program's WGSL kernels compile (conv, scan, delta rule, attention, rope, positions and sample of many sequences)", () => {
  // jamba: attention; bamba: rope; recurrent_gemma: positions and a sliding
  // window; qwen3_next: the delta rule a sequence
  for (const [model, slots] of [['mamba1_tiny', '12'], ['mamba2_tiny', '5'], ['falcon_tiny', '3'],
                                ['jamba_tiny', '3'], ['bamba_tiny', '2'], ['recurrent_gemma_tiny', '3'],
                                ['qwen3_next_tiny', '3']]) {
    const b = compile(join(ROOT, 'tests/data', model), dir, `${model}-slots`, ['--chunk', '4', '--slots', slots]);
    const c = web(['check', b]);
    assert.equal(c.code, 0, `${model}: ${c.err}`);
    assert.match(c.out, /^\d+ kernels compile$/m);
  }
});

test("a wide model's prefill scan, G threads a row of N states, compiles in WGSL", () => {
  // 8,192 channels of 16 states: 4 threads of 4 states a channel (scan_ch);
  // Falcon-Mamba's cached B and C norms beside it (no weights: check only compiles)
  for (const [yaml, type] of [['mamba1', 'mamba'], ['falcon_mamba', 'falcon_mamba']]) {
    const cfg = join(dir, `${yaml}-wide.json`);
    writeFileSync(cfg, JSON.stringify({ model_type: type, vocab_size: 256, hidden_size: 128,
      intermediate_size: 8192, state_size: 16, time_step_rank: 8, conv_kernel: 4,
      num_hidden_layers: 1, layer_norm_epsilon: 1e-5, mixer_rms_eps: 1e-6, use_bias: false,
      use_conv_bias: true, tie_word_embeddings: true }));
    const b = compile(join(ROOT, `models/${yaml}.yaml`), dir, `${yaml}-wide`, ['--config', cfg, '--chunk', '64']);
    const scans = readBundle(readFileSync(b), b).manifest.kernels.filter((k) => / G=4 U=8 /.test(k.params));
    assert.equal(scans.length, 1, `${yaml}: one prefill scan of 4 threads a channel`);
    const c = web(['check', b]);
    assert.equal(c.code, 0, `${yaml}: ${c.err}`);
    assert.match(c.out, /^\d+ kernels compile$/m);
  }
});

test('check compiles every kernel; bench reports decode and prefill tokens/s', () => {
  const c = web(['check', bundle]);
  assert.equal(c.code, 0, c.err);
  // dt_proj runs inside the scan at up to 4 rows, and decode's conv in in_proj's kernel
  assert.match(c.out, /^14 kernels compile$/m);
  const b = web(['bench', bundle, '--weights', FIX, '-n', '8', '--json']);
  assert.equal(b.code, 0, b.err);
  const j = JSON.parse(b.out);
  for (const k of ['decode_tokens_per_s', 'decode_feedback_tokens_per_s', 'prefill_tokens_per_s'])
    assert.ok(j[k] > 0, `${k}: ${j[k]}`);
  assert.equal(j.decode_tokens, 8);
  assert.equal(j.prefill_tokens, 16); // 4 runs of the 4-token prefill program
  assert.equal(j.weight_bytes, readBundle(readFileSync(bundle), bundle).manifest.weights.reduce((a, w) => a + w.region.bytes, 0));
});

test('bench --profile times every dispatch of decode and prefill, as ssmc bench --profile', () => {
  const m = readBundle(readFileSync(bundle), bundle).manifest;
  const b = web(['bench', bundle, '--weights', FIX, '-n', '2', '--profile', '--json']);
  assert.equal(b.code, 0, b.err);
  const j = JSON.parse(b.out);
  for (const [name, prog, runs] of [['decode', m.decode, 64], ['prefill', m.prefill, 8]]) {
    const p = j[name];
    assert.equal(p.runs, runs);
    assert.equal(p.dispatches, prog.steps.length, name);
    assert.deepEqual(p.steps.map((s) => s.op), prog.steps.map((st) => st.op), name);
    assert.deepEqual(p.steps.map((s) => s.kernel), prog.steps.map((st) => m.kernels[st.kernel].name), name);
    assert.ok(p.steps.every((s) => s.us > 0), `${name}: a dispatch without time`);
    const sum = p.steps.reduce((a, s) => a + s.us, 0);
    assert.ok(Math.abs(sum - p.us) <= 1e-3 * p.steps.length, `${name}: ${sum} against ${p.us}`);
    // the families' and op groups' totals cover the dispatches
    assert.equal(p.families.reduce((a, f) => a + f.dispatches, 0), prog.steps.length);
    assert.deepEqual(new Set(p.families.map((f) => f.name)), new Set(prog.steps.map((st) => m.kernels[st.kernel].family)));
    assert.equal(p.op_groups.reduce((a, g) => a + g.dispatches, 0), prog.steps.length);
    const bytes = prog.steps.map((st) => st.bindings.reduce((a, r) => a + r.bytes, 0));
    assert.deepEqual(p.steps.map((s) => s.bytes), bytes, name);
  }
});

test("bench --slots B: the batched program's aggregate tokens/s (ssmc bench --batch B), and its profile", () => {
  const b2 = compile(FIX, dir, 'm1-slots2', ['--chunk', '4', '--slots', '2']);
  const m = readBundle(readFileSync(b2), b2).manifest;
  const b = web(['bench', b2, '--weights', FIX, '-n', '4', '--slots', '2', '--batch', '2', '--profile', '--json']);
  assert.equal(b.code, 0, b.err);
  const j = JSON.parse(b.out);
  assert.ok(j.batch_tokens_per_s > 0, `batch_tokens_per_s: ${j.batch_tokens_per_s}`);
  assert.equal(j.batch, 2);
  assert.equal(j.steps, 4);
  assert.equal(j.decode_steps_per_submission, 2);
  assert.equal(j.batch_program.runs, 16);
  assert.deepEqual(j.batch_program.steps.map((s) => s.op), m.batch.steps.map((st) => st.op));
  // the sequences must be the bundle's slots; --slots is a count
  const r = web(['bench', bundle, '--weights', FIX, '--slots', '2']);
  assert.equal(r.code, 1);
  assert.match(r.err, /m1\.ssmb: --slots 2: the bundle's batched decode program advances 0 sequences \(compile it with --slots 2\)/);
  const u = web(['bench', bundle, '--slots', '0']);
  assert.equal(u.code, 2);
  assert.match(u.err, /--slots: expected a sequence count from 1 to 256, got '0'/);
});

test('the profile report prints totals per family and op group, and each dispatch, as ssmc bench --profile', () => {
  const steps = [{ kernel: 'k0_embed', family: 'embed', op: 'embed T=1', us: 2, bytes: 4000 },
                 { kernel: 'k1_gemv', family: 'gemv', op: 'rmsnorm+matmul M=1 K=64', us: 6, bytes: 30000 },
                 { kernel: 'k1_gemv', family: 'gemv', op: 'rmsnorm+matmul M=1 K=64', us: 4, bytes: 30000 },
                 { kernel: 'k2_gemv', family: 'gemv', op: 'matmul+add M=1', us: 8, bytes: 12000 }];
  assert.equal(profileReport('decode', steps, 64, false), [
    'decode: 4 dispatches, 20.0 us of GPU time per run (mean of 64), 3.8 GB/s over their bindings',
    '  by kernel family:',
    '    embed                           1 dispatches        2.0 us  10.0%      2.0 GB/s',
    '    gemv                            3 dispatches       18.0 us  90.0%      4.0 GB/s',
    '  by op group:',
    '    embed                           1 dispatches        2.0 us  10.0%      2.0 GB/s',
    '    rmsnorm+matmul                  2 dispatches       10.0 us  50.0%      6.0 GB/s',
    '    matmul+add                      1 dispatches        8.0 us  40.0%      1.5 GB/s',
    '  dispatches:',
    '       0 k0_embed              2.00 us      2.0 GB/s  embed T=1',
    '       1 k1_gemv               6.00 us      5.0 GB/s  rmsnorm+matmul M=1 K=64',
    '       2 k1_gemv               4.00 us      7.5 GB/s  rmsnorm+matmul M=1 K=64',
    '       3 k2_gemv               8.00 us      1.5 GB/s  matmul+add M=1'].join('\n'));
  const j = profileReport('decode', steps, 64, true);
  assert.deepEqual(j.op_groups.map((g) => [g.name, g.dispatches, g.us, g.share]),
                   [['embed', 1, 2, 0.1], ['rmsnorm+matmul', 2, 10, 0.5], ['matmul+add', 1, 8, 0.4]]);
  assert.equal(j.gb_per_s, 3.8);
});

test('profiling needs an adapter with timestamp queries', async () => {
  const b = readBundle(readFileSync(bundle), bundle);
  const ck = await openCheckpoint(dirFiles(FIX), FIX);
  const gpu = { requestAdapter: async () => ({ limits: ADAPTER_LIMITS, features: new Set(['subgroups']), info: {},
                                               requestDevice: async () => assert.fail('no device wanted') }) };
  await assert.rejects(Runtime.open({ gpu, bundle: b, checkpoint: ck, profile: true }),
                       /m1\.ssmb: the adapter offers no timestamp queries \('timestamp-query'\): it cannot time the dispatches/);
  await ck.close();
});

test('workgroup memory is counted from the WGSL, as the kernels declare it', () => {
  const wgsl = `const L: u32 = 64u;\nconst TT = 4u;\nstruct S { a: f32, b: u32, }\n` +
    `var<workgroup> x: array<f32, L>;\nvar<workgroup> y: array<array<f32, 32>, TT>;\n` +
    `var<workgroup> s: S;\nvar<workgroup> p: atomic<u32>;\nvar<workgroup> v: array<vec4<f32>, 2u>;\nvar<private> q: array<f32, 999>;`;
  assert.equal(workgroupBytes(wgsl), 64 * 4 + 32 * 4 * 4 + 8 + 4 + 32);
  assert.equal(workgroupBytes('fn f() {}'), 0);
  assert.throws(() => workgroupBytes('var<workgroup> x: array<f32, N>;'), /workgroup array length 'N' is not a constant/);
  const b = readBundle(readFileSync(bundle), bundle);
  const sizes = b.manifest.kernels.map((k) => workgroupBytes(b.text(k.wgsl)));
  assert.ok(Math.max(...sizes) >= 1024 && Math.max(...sizes) <= 16384, `${sizes}`);
});

test("an adapter with too little is refused, naming the limit; so is no adapter", async () => {
  const b = readBundle(readFileSync(bundle), bundle);
  const ck = await openCheckpoint(dirFiles(FIX), FIX);
  const fake = (limits) => ({ requestAdapter: async () => ({ limits: { ...ADAPTER_LIMITS, ...limits }, info: {}, requestDevice: async () => assert.fail('no device wanted') }) });
  await assert.rejects(Runtime.open({ gpu: fake({ maxStorageBuffersPerShaderStage: 2 }), bundle: b, checkpoint: ck }),
                       /this WebGPU adapter's maxStorageBuffersPerShaderStage is 2, but the bundle needs 3 \(its kernel with the most storage windows\)/);
  await assert.rejects(Runtime.open({ gpu: fake({ maxBufferSize: 4096 }), bundle: b, checkpoint: ck }),
                       /maxBufferSize is 4096, but the bundle needs 517888 \(its largest buffer\)/);
  await assert.rejects(Runtime.open({ gpu: fake({ maxComputeInvocationsPerWorkgroup: 64 }), bundle: b, checkpoint: ck }),
                       /maxComputeInvocationsPerWorkgroup is 64, but the bundle needs 256/);
  await assert.rejects(Runtime.open({ gpu: fake({ maxComputeWorkgroupStorageSize: 1024 }), bundle: b, checkpoint: ck }),
                       /maxComputeWorkgroupStorageSize is 1024, but the bundle needs \d{4,} \(its kernel with the most workgroup memory\)/);
  await assert.rejects(Runtime.open({ gpu: fake({ minStorageBufferOffsetAlignment: 512 }), bundle: b, checkpoint: ck }),
                       /minStorageBufferOffsetAlignment is 512, but the bundle aligns to 256/);
  await assert.rejects(Runtime.open({ gpu: { requestAdapter: async () => null }, bundle: b, checkpoint: ck }), /no WebGPU adapter/);
  await assert.rejects(Runtime.open({ gpu: undefined, bundle: b, checkpoint: ck }), /WebGPU is not available here/);
  await ck.close();
});

test('a file or symlink planted at the temporary name of --dump-logits is neither followed nor removed', () => {
  const victim = join(dir, 'victim'), dump = join(dir, 'planted.f32');
  writeFileSync(victim, 'victim');
  writeFileSync(dump, 'old');
  // the shell's pid is the run's (exec), so its temporary name is known
  const r = spawnSync('sh', ['-c', 'ln -s "$1" "$2.tmp-$$" && exec "$3" "$4" run "$5" --weights "$6" --tokens 1,2 -n 2 --dump-logits "$2"',
    'sh', victim, dump, process.execPath, join(WEB, 'ssmc-web.mjs'), bundle, FIX], { encoding: 'utf8' });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /--dump-logits .*planted\.f32: EEXIST/);
  assert.equal(readFileSync(victim, 'utf8'), 'victim');
  assert.equal(readFileSync(dump, 'utf8'), 'old');
  const left = readdirSync(dir).filter((f) => f.startsWith('planted.f32.tmp-'));
  assert.equal(left.length, 1); // the planted link, where it was
  assert.equal(readlinkSync(join(dir, left[0])), victim);
});
