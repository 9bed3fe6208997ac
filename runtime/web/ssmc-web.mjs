#!/usr/bin/env node
// ssmc-web.mjs — the WebGPU host from the command line, on Dawn (the npm
// package `webgpu`), with the contract of `ssmc run` and `ssmc bench`:
//
//   node runtime/web/ssmc-web.mjs run BUNDLE [--weights DIR] (--tokens IDS | --prompt TEXT|-) [-n N]
//        [--greedy | --temperature T --top-k K --top-p P --min-p M --seed S] [--repeat-penalty P]
//        [--tokenizer FILE] [--eos ID] [--dump-logits FILE] [--batch K] [-q | --json]
//   node runtime/web/ssmc-web.mjs bench BUNDLE [--weights DIR] [-n N] [--batch K] [--slots B] [--profile] [--json]
//   node runtime/web/ssmc-web.mjs check BUNDLE
//
// --weights defaults to the weights directory the bundle records (as ssmc run).
// generation_config.json there gives run its defaults, as it gives ssmc run
// (the end-of-text ids of a --prompt run, and the sampler settings not given).
// With --tokens, the last line on stdout is the generated ids, comma-separated;
// with --prompt, the text is printed and its continuation streamed (never half
// a UTF-8 character). --dump-logits writes little-endian f32 rows of length
// vocab, one per position processed, through a temporary file renamed over
// FILE. After a run, stderr has the timing summary of `ssmc run` (device,
// load, prompt and generation rates; --json: one JSON line with its keys;
// -q: none). Errors go to stderr with status 1 (2 for usage).

import { open, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { readBundle, checkConfig } from './bundle.mjs';
import { readGenerationConfig } from './genconfig.mjs';
import { openCheckpoint } from './safetensors.mjs';
import { Runtime, GEN_BATCH } from './gpu.mjs';
import { Session } from './session.mjs';
import { Tokenizer, StreamDecoder } from './tokenizer.mjs';
import { nodeGpu, dirFiles } from './node.mjs';
import { profileReport } from './profile.mjs';

const USAGE = `usage:
  node runtime/web/ssmc-web.mjs run BUNDLE [--weights DIR] (--tokens 1,2,3 | --prompt TEXT|-) [-n N]
       [--greedy | --temperature T --top-k K --top-p P --min-p M --seed S] [--repeat-penalty P]
       [--tokenizer tokenizer.json] [--eos ID] [--dump-logits FILE] [--batch K] [-q | --json]
  node runtime/web/ssmc-web.mjs bench BUNDLE [--weights DIR] [-n N] [--batch K] [--slots B] [--profile] [--json]
  node runtime/web/ssmc-web.mjs check BUNDLE   (compiles every kernel's WGSL)
The same contract as ssmc run and ssmc bench, on WebGPU (Dawn); --weights defaults to
the weights directory the bundle records, and its generation_config.json gives run's
defaults (end-of-text ids, sampler settings), which the options given override.
--batch K: decode steps queued per submission (1 to ${GEN_BATCH}; default ${GEN_BATCH}).
bench --slots B: instead, the batched decode program's aggregate tokens/s, B sequences
stepping together, N steps (a bundle compiled with --slots B; ssmc bench --batch B).
run -q: no timing summary on stderr; run --json: the summary as one line of JSON.
bench --profile: each dispatch's GPU time (timestamp queries; 64 decode runs, 8 prefill
runs; with --slots, 16 runs of the batched program) with totals per kernel family and
op group, as ssmc bench --profile.
`;

class UsageError extends Error {}

// --name VALUE or --name=VALUE against `spec` ({name: kind} with kind 'flag',
// 'str', or [lo, hi, what, int, open]); one positional.
function parseArgs(cmd, argv, spec) {
  const out = { _: null, given: new Set() };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a[0] !== '-' || a === '-') {
      if (out._ !== null) throw new UsageError(`${cmd}: unexpected argument '${a}'`);
      out._ = a;
      continue;
    }
    const eq = a.indexOf('=');
    const name = eq > 0 ? a.slice(0, eq) : a;
    const kind = spec[name];
    if (!kind) throw new UsageError(`${cmd}: unknown option '${a}'`);
    out.given.add(name);
    if (kind === 'flag') {
      if (eq > 0) throw new UsageError(`${cmd}: option '${name}' takes no value`);
      out[name] = true;
      continue;
    }
    const v = eq > 0 ? a.slice(eq + 1) : argv[++i];
    if (v === undefined) throw new UsageError(`${cmd}: option '${name}' needs a value`);
    if (kind === 'str') {
      out[name] = v;
      continue;
    }
    const [lo, hi, what, int, open] = kind;
    const d = Number(v);
    if (v.trim() === '' || !(d >= lo && d <= hi) || (open && d === lo) || (int && !Number.isInteger(d)))
      throw new UsageError(`${name}: expected ${what}, got '${v}'`);
    out[name] = d;
  }
  return out;
}

function parseIds(what, s) {
  const ids = [];
  for (const part of s.split(',')) {
    if (!/^\d+$/.test(part) || Number(part) > 2147483647)
      throw new Error(`${what}: expected comma-separated token ids, got '${s}'`);
    ids.push(Number(part));
  }
  return ids;
}

async function readStdin() {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return Buffer.concat(chunks).toString('utf8');
}

// A file's text, or null when there is none.
async function readIfThere(path) {
  return readFile(path, 'utf8').catch((e) => (e.code === 'ENOENT' ? null : Promise.reject(e)));
}

// The runtime of the bundle args._ on the weights of --weights, and the
// defaults of generation_config.json there (genconfig.mjs), read first.
async function openRuntime(args, cmd, profile = false) {
  if (!args._) throw new UsageError(`${cmd}: missing BUNDLE`);
  const bundle = readBundle(await readFile(args._), args._);
  // bench --slots B: the bundle's batched program, before any weight is read
  const slots = bundle.manifest.batch?.tokens ?? 0;
  if (args['--slots'] && slots !== args['--slots'])
    throw new Error(`${args._}: --slots ${args['--slots']}: the bundle's batched decode program advances ${slots} ` +
                    `sequences (compile it with --slots ${args['--slots']})`);
  // the weights directory the bundle records, unless --weights names one
  args['--weights'] ??= bundle.manifest.sourceDir;
  if (!args['--weights'])
    throw new UsageError(`${cmd}: give --weights DIR (${args._} records no weights directory)`);
  // the weights' config.json, where there is one, against the bundle's record
  const config = join(args['--weights'], 'config.json');
  const text = await readIfThere(config);
  if (text !== null) checkConfig(bundle, text, config, args['--weights']);
  const genPath = join(args['--weights'], 'generation_config.json');
  const generation = readGenerationConfig(await readIfThere(genPath), genPath, bundle.manifest.vocab);
  const checkpoint = await openCheckpoint(dirFiles(args['--weights']), args['--weights']);
  try {
    return { rt: await Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint, profile }), generation };
  } finally {
    await checkpoint.close();
  }
}

// `ssmc run`'s timing summary on stderr (cli/progress.c: ssm_cli_print_summary),
// line for line, for a run whose runtime took `loadS` seconds to open.
const REASON = 'the WebGPU host runs the bundle';
function printSummary(rt, stats, loadS, json) {
  const rate = (n, s) => (s > 0 ? n / s : 0);
  const { promptTokens: pt, promptS: ps, generatedTokens: gt, generateS: gs } = stats;
  if (json) {
    const us = (x) => Math.round(x * 1e6) / 1e6, hundredths = (x) => Math.round(x * 100) / 100;
    process.stderr.write(JSON.stringify({
      device: rt.deviceName, backend: 'webgpu', backend_reason: REASON, dtype: rt.m.dtype, load_s: us(loadS),
      compile_s: 0, cache: 'off',
      prompt_tokens: pt, prompt_s: us(ps), prompt_tokens_per_s: hundredths(rate(pt, ps)),
      generated_tokens: gt, generate_s: us(gs), generated_tokens_per_s: hundredths(rate(gt, gs)),
    }) + '\n');
    return;
  }
  process.stderr.write(`device:     ${rt.deviceName}, WebGPU (Dawn), ${rt.m.dtype} weights\n` +
                       `backend:    webgpu: ${REASON}\n` +
                       `load:       ${loadS.toFixed(2)} s\n` +
                       `prompt:     ${pt} tokens, ${ps.toFixed(3)} s, ${rate(pt, ps).toFixed(1)} tokens/s\n` +
                       `generation: ${gt} tokens, ${gs.toFixed(3)} s, ${rate(gt, gs).toFixed(1)} tokens/s\n`);
}

const SAMPLING = ['--temperature', '--top-k', '--top-p', '--min-p', '--seed'];

async function cmdRun(argv) {
  const a = parseArgs('run', argv, {
    '--weights': 'str', '--tokens': 'str', '--prompt': 'str', '--tokenizer': 'str', '--dump-logits': 'str',
    '-n': [0, 1 << 24, 'a token count from 0 to 16777216', true],
    '--eos': [0, 2147483647, 'a token id', true],
    '--greedy': 'flag', '-q': 'flag', '--quiet': 'flag', '--json': 'flag',
    '--temperature': [0, 1e6, 'a number >= 0'],
    '--top-k': [0, 2147483647, 'a count >= 0 (0: off)', true],
    '--top-p': [0, 1, 'a number in (0, 1] (1: off)', false, true],
    '--min-p': [0, 1, 'a number in [0, 1] (0: off)'],
    '--repeat-penalty': [0, 3.4e38, 'a number above 0 (1: off)', false, true],
    '--seed': [0, (1 << 24) - 1, 'an integer in [0, 16777215]', true],
    '--batch': [1, GEN_BATCH, `a count from 1 to ${GEN_BATCH}`, true],
  });
  if (a['--greedy'] && SAMPLING.some((s) => a.given.has(s)))
    throw new UsageError('--greedy: cannot be combined with --temperature, --top-k, --top-p, --min-p or --seed');
  if (!a['--tokens'] === !a['--prompt']) throw new UsageError('run: give --tokens IDS or --prompt TEXT');
  const t0 = performance.now();
  const { rt, generation } = await openRuntime(a, 'run');
  const loadS = (performance.now() - t0) / 1e3;
  try {
    const s = new Session(rt);
    const rows = a['--dump-logits'] ? [] : null;
    // an option given, else generation_config.json's default (but --greedy
    // is greedy whatever the file says), else off
    const d = generation.sampling, greedy = !!a['--greedy'];
    const pick = (opt, key, off) => a[opt] ?? (greedy ? off : d[key] ?? off);
    const o = {
      temperature: pick('--temperature', 'temperature', 0), topK: pick('--top-k', 'topK', 0),
      topP: pick('--top-p', 'topP', 1), minP: pick('--min-p', 'minP', 0), seed: a['--seed'] ?? 0,
      repeatPenalty: a['--repeat-penalty'] ?? d.repeatPenalty ?? 1,
      hostGreedy: greedy, batch: a['--batch'],
      onLogits: rows ? (row) => void rows.push(Float32Array.from(row)) : undefined,
    };
    const n = a['-n'] ?? 16;
    let prompt, dec = null;
    if (a['--tokens']) {
      prompt = parseIds('--tokens', a['--tokens']);
    } else {
      const path = a['--tokenizer'] ?? join(a['--weights'], 'tokenizer.json');
      let text;
      try {
        text = await readFile(path, 'utf8');
      } catch (e) {
        throw new Error(`--prompt needs a tokenizer (--tokenizer FILE, or tokenizer.json in the weights directory): ${e.message}`);
      }
      const tok = new Tokenizer(text, path);
      const input = a['--prompt'] === '-' ? await readStdin() : a['--prompt'];
      prompt = tok.encode(input);
      if (!prompt.length) throw new Error('--prompt: the text has no tokens');
      // --eos, else generation_config.json's ids, else config.json's, else the tokenizer's
      o.eos = a['--eos'] ?? (generation.eos.length ? generation.eos
                             : rt.m.eos >= 0 ? rt.m.eos : tok.tokenId('<|endoftext|>'));
      dec = new StreamDecoder(tok, true);
      process.stdout.write(input);
      o.onToken = (id) => void process.stdout.write(dec.feed(id));
    }
    const ids = await s.generate(prompt, n, o);
    if (rows) {
      const tmp = `${a['--dump-logits']}.tmp-${process.pid}`;
      const bytes = new Uint8Array(rows.length * rt.vocab * 4);
      rows.forEach((r, i) => bytes.set(new Uint8Array(r.buffer), i * rt.vocab * 4));
      let made = false;
      try {
        // created here or not at all ('wx'): a file or symlink planted at
        // the name is neither followed nor replaced, nor removed below
        const f = await open(tmp, 'wx');
        made = true;
        try {
          await f.writeFile(bytes);
        } finally {
          await f.close();
        }
        await rename(tmp, a['--dump-logits']);
      } catch (e) {
        if (made) await rm(tmp, { force: true });
        throw new Error(`--dump-logits ${a['--dump-logits']}: ${e.message}`);
      }
    }
    if (dec) process.stdout.write(dec.flush() + '\n');
    else process.stdout.write(ids.join(',') + '\n');
    if (!a['-q'] && !a['--quiet']) {
      printSummary(rt, s.stats, loadS, a['--json']);
      if (generation.from.length && !a['--json'])
        process.stderr.write(`defaults from generation_config.json: ${generation.from.join(', ')} ` +
                             '(options given override them)\n');
    }
  } finally {
    rt.destroy();
  }
}

async function cmdBench(argv) {
  const a = parseArgs('bench', argv, {
    '--weights': 'str', '--json': 'flag', '--profile': 'flag',
    '-n': [0, 1 << 24, 'a token count from 0 to 16777216', true],
    '--batch': [1, GEN_BATCH, `a count from 1 to ${GEN_BATCH}`, true],
    '--slots': [1, 256, 'a sequence count from 1 to 256', true],
  });
  const { rt } = await openRuntime(a, 'bench', !!a['--profile']);
  try {
    if (a['--slots']) return await benchSlots(rt, a);
    const b = await new Session(rt).bench(a['-n'] ?? 128, a['--batch']);
    // the programs timed, as ssmc bench --profile: 64 decode runs, 8 prefill runs
    const profiles = [];
    if (a['--profile'])
      for (const [name, prefill, runs] of [['decode', false, 64], ['prefill', true, 8]])
        profiles.push([name, await rt.profile(prefill, runs), runs]);
    const gbs = (b.decode_tokens_per_s * b.weight_bytes) / 1e9;
    if (a['--json']) {
      console.log(JSON.stringify({
        decode_tokens_per_s: +b.decode_tokens_per_s.toFixed(2),
        decode_ms_per_token: +(1e3 / b.decode_tokens_per_s).toFixed(4),
        decode_feedback_tokens_per_s: +b.decode_feedback_tokens_per_s.toFixed(2),
        prefill_tokens_per_s: +b.prefill_tokens_per_s.toFixed(2),
        decode_tokens: b.decode_tokens, prefill_tokens: b.prefill_tokens, weight_bytes: b.weight_bytes,
        decode_gb_per_s: +gbs.toFixed(2), decode_steps_per_submission: b.batch,
        device: rt.deviceName, host: 'webgpu (Dawn, node)',
        ...Object.fromEntries(profiles.map(([name, steps, runs]) => [name, profileReport(name, steps, runs, true)])),
      }));
    } else {
      console.log(`device: ${rt.deviceName} (WebGPU, Dawn)\n` +
                  `decode:  ${b.decode_tokens_per_s.toFixed(1)} tokens/s (${(1e3 / b.decode_tokens_per_s).toFixed(3)} ms/token, ` +
                  `${b.decode_tokens} tokens; weights ${(b.weight_bytes / 1e6).toFixed(1)} MB -> ${gbs.toFixed(1)} GB/s)\n` +
                  `decode, token fed back on the device: ${b.decode_feedback_tokens_per_s.toFixed(1)} tokens/s ` +
                  `(${b.batch} steps per submission)\n` +
                  `prefill: ${b.prefill_tokens_per_s.toFixed(1)} tokens/s (${b.prefill_tokens} tokens)`);
      for (const [name, steps, runs] of profiles) console.log('\n' + profileReport(name, steps, runs, false));
    }
  } finally {
    rt.destroy();
  }
}

// bench --slots B: the batched decode program's aggregate tokens a second,
// as ssmc bench --batch B reports them (cli/run.c: bench_batch). ssmc-web's
// --batch already counts decode steps per submission, so the sequences are
// --slots, the option that compiled them; --batch still sets the steps
// queued per submission. openRuntime has checked that the bundle has B slots.
async function benchSlots(rt, a) {
  const B = a['--slots'], n = a['-n'] ?? 128;
  const s = new Session(rt);
  const tps = await s.benchBatch(n, a['--batch']);
  const profile = a['--profile'] ? await rt.profile(2, 16) : null;
  if (a['--json']) {
    console.log(JSON.stringify({
      batch: B, batch_tokens_per_s: +tps.toFixed(2), steps: n, decode_steps_per_submission: a['--batch'] ?? GEN_BATCH,
      device: rt.deviceName, host: 'webgpu (Dawn, node)',
      ...(profile ? { batch_program: profileReport('batch', profile, 16, true) } : {}),
    }));
  } else {
    console.log(`device: ${rt.deviceName} (WebGPU, Dawn)\n` +
                `batched decode: ${B} sequences, ${tps.toFixed(1)} tokens/s in all (${(tps / B).toFixed(1)} each, ${n} steps)`);
    if (profile) console.log('\n' + profileReport('batch', profile, 16, false));
  }
}

// Compiles every kernel's WGSL and builds its pipeline on the default
// adapter; prints each error with the kernel's name.
async function cmdCheck(argv) {
  const a = parseArgs('check', argv, {});
  if (!a._) throw new UsageError('check: missing BUNDLE');
  const bundle = readBundle(await readFile(a._), a._);
  const { checkKernels } = await import('./gpu.mjs');
  const errors = await checkKernels(await nodeGpu(), bundle);
  for (const e of errors) console.error(`ssmc-web: ${e}`);
  if (errors.length) process.exitCode = 1;
  else console.log(`${bundle.manifest.kernels.length} kernels compile`);
}

const COMMANDS = { run: cmdRun, bench: cmdBench, check: cmdCheck };

async function main(argv) {
  if (!argv.length) {
    process.stderr.write(USAGE);
    return 2;
  }
  if (argv[0] === '--help' || argv[0] === '-h' || argv.slice(1).some((x) => x === '--help' || x === '-h')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const fn = COMMANDS[argv[0]];
  try {
    if (!fn) throw new UsageError(`unknown command '${argv[0]}'`);
    await fn(argv.slice(1));
    return process.exitCode ?? 0;
  } catch (e) {
    process.stderr.write(`ssmc-web: ${e.message}\n`);
    if (e instanceof UsageError) {
      process.stderr.write(USAGE);
      return 2;
    }
    if (process.env.SSMC_WEB_DEBUG) console.error(e.stack);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
