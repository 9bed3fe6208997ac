// weights.test.mjs — safetensors in the WebGPU host: from files (Node) and
// over HTTP by Range requests on the .safetensors file itself, as the
// browser reads it; a server without Range support (python3 -m http.server)
// is read once in full; with a cache (the browser's Cache Storage) a second
// load downloads nothing. Truncated and malformed files give clear errors,
// and a checkpoint that does not fit the bundle names the tensor.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync, copyFileSync } from 'node:fs';
import { join } from 'node:path';
import { compile, scratch, ssmc, ROOT, WEB, SSMC } from './helpers.mjs';
import { openCheckpoint, httpFiles, quantNames, WeightsError } from '../safetensors.mjs';
import { toHalf, toQuant } from '../transform.mjs';
import { readBundle, checkConfig, BundleError } from '../bundle.mjs';
import { Runtime } from '../gpu.mjs';
import { nodeGpu, dirFiles } from '../node.mjs';

const FIX = join(ROOT, 'tests/data/mamba1_tiny');
const file = readFileSync(join(FIX, 'model.safetensors'));
const dir = scratch();

// A static server over `files` (name -> bytes) that honours Range unless
// `ranges` is false; it counts requests and bytes sent.
function serve(files, ranges = true) {
  const stats = { requests: 0, bytes: 0 };
  const server = createServer((req, res) => {
    stats.requests++;
    const body = files[decodeURIComponent(new URL(req.url, 'http://x').pathname.slice(1))];
    if (!body) return res.writeHead(404).end();
    const m = ranges && /^bytes=(\d+)-(\d+)$/.exec(req.headers.range || '');
    if (m) {
      const a = Number(m[1]), b = Math.min(Number(m[2]), body.length - 1);
      stats.bytes += b - a + 1;
      res.writeHead(206, { 'Content-Range': `bytes ${a}-${b}/${body.length}`, 'Content-Length': b - a + 1 });
      return res.end(body.subarray(a, b + 1));
    }
    stats.bytes += body.length;
    res.writeHead(200, { 'Content-Length': body.length }).end(body);
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () =>
    resolve({ base: `http://127.0.0.1:${server.address().port}/`, stats, close: () => server.close() })));
}

// The Cache Storage API's match/put, in memory (Node has no `caches`); like
// the real one, it ignores URL fragments.
function memoryCache() {
  const m = new Map();
  const key = (k) => k.split('#')[0];
  return {
    entries: m,
    match: async (k) => (m.has(key(k)) ? new Response(m.get(key(k)).body, { headers: m.get(key(k)).headers }) : undefined),
    put: async (k, r) => void m.set(key(k), { body: new Uint8Array(await r.arrayBuffer()), headers: r.headers }),
  };
}

const servers = [];
after(() => servers.forEach((s) => s.close()));

test('over HTTP by Range requests: the same tensors as from the file, without the whole file', async () => {
  const s = await serve({ 'model.safetensors': file });
  servers.push(s);
  const local = await openCheckpoint(dirFiles(FIX), FIX);
  const remote = await openCheckpoint(httpFiles(s.base, ['model.safetensors']), s.base);
  const name = 'backbone.layers.1.mixer.A_log', shape = local.tensors.get(name).shape;
  assert.deepEqual(await remote.readF32(name, shape), await local.readF32(name, shape));
  assert.ok(s.stats.bytes < file.length / 4, `${s.stats.bytes} of ${file.length} bytes fetched for one tensor`);
  assert.equal(s.stats.requests, 3); // length, header, the tensor
  await local.close();
});

test('a server without Range support is read once; a cache serves a reload with no request', async () => {
  const s = await serve({ 'model.safetensors': file }, false);
  servers.push(s);
  const cache = memoryCache();
  let downloaded = 0, cached = 0;
  const opts = { cache, onBytes: (n) => (downloaded += n), onCached: (n) => (cached += n) };
  const ck = await openCheckpoint(httpFiles(s.base, ['model.safetensors'], opts), s.base);
  for (const [n, t] of ck.tensors) await ck.readF32(n, t.shape);
  assert.equal(s.stats.requests, 1);
  assert.equal(downloaded, file.length);
  assert.equal(cached, 0);
  const again = await openCheckpoint(httpFiles(s.base, ['model.safetensors'], opts), s.base);
  for (const [n, t] of again.tensors) await again.readF32(n, t.shape);
  assert.equal(s.stats.requests, 1, 'the reload went to the network');
  assert.equal(downloaded, file.length);
  assert.equal(cached, file.length); // onCached counts what the reload read from the cache

  const r = await serve({ 'model.safetensors': file });
  servers.push(r);
  const c2 = memoryCache();
  let got = 0, fromCache = 0;
  const o2 = { cache: c2, onBytes: (n) => (got += n), onCached: (n) => (fromCache += n) };
  const ranged = await openCheckpoint(httpFiles(r.base, ['model.safetensors'], o2), r.base);
  const w = 'backbone.embeddings.weight';
  await ranged.readF32(w, ranged.tensors.get(w).shape);
  const before = r.stats.requests, firstGot = got;
  assert.equal(fromCache, 0);
  const second = await openCheckpoint(httpFiles(r.base, ['model.safetensors'], o2), r.base);
  await second.readF32(w, second.tensors.get(w).shape);
  assert.equal(got, firstGot);
  assert.equal(fromCache, firstGot); // the same ranges, read from the cache this time
  assert.equal(r.stats.requests, before, 'cached ranges went to the network again');
  assert.equal(c2.entries.size, 3); // the length, the header and the tensor, each its own entry
});

test('truncated and malformed safetensors give errors that say what is wrong', async () => {
  const cases = [
    ['short', file.subarray(0, 5), /file is 5 bytes, too short for a safetensors header/],
    ['truncated', file.subarray(0, file.length - 100), /data_offsets \[\d+,\d+\] exceed the data section/],
    ['absurd header', Buffer.concat([Buffer.from([0, 0, 0, 0, 0, 0, 0, 1]), file.subarray(8)]), /header length \d+ is absurd/],
    ['header past the end', Buffer.concat([Buffer.from([0, 0, 0, 0, 0, 0, 1, 0]), file.subarray(8, 100)]), /header length 281474976710656 is absurd|exceeds the file/],
  ];
  const hlen = Number(file.readBigUint64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + hlen).toString());
  const withHeader = (h) => {
    const text = Buffer.from(JSON.stringify(h).padEnd(hlen, ' '));
    assert.equal(text.length, hlen);
    return Buffer.concat([file.subarray(0, 8), text, file.subarray(8 + hlen)]);
  };
  const names = Object.keys(header).filter((k) => k !== '__metadata__');
  const name = names.reduce((a, b) => (header[a].data_offsets[0] > header[b].data_offsets[0] ? a : b));
  cases.push(['F64', withHeader({ ...header, [name]: { ...header[name], dtype: 'F64' } }), /unsupported dtype 'F64' for tensor/]);
  const [b0, b1] = header[name].data_offsets;
  cases.push(['overlap', withHeader({ ...header, [name]: { ...header[name], data_offsets: [0, b1 - b0] } }), /tensors '.*' \[\d+,\d+\] and '.*' \[\d+,\d+\] overlap/]);
  // a key given twice (JSON.parse would keep the last one), as the C reader refuses it
  const dupText = file.subarray(8, 8 + hlen).toString('latin1').replace('{"format":"pt"}', '{"a":"","a":""}');
  cases.push(['duplicate key', Buffer.concat([file.subarray(0, 8), Buffer.from(dupText, 'latin1'), file.subarray(8 + hlen)]),
              /header: the key 'a' is given twice in the object at __metadata__/]);
  cases.push(['not JSON', Buffer.concat([file.subarray(0, 8), Buffer.from('{'.padEnd(hlen, 'x')), file.subarray(8 + hlen)]), /header is not valid JSON/]);
  for (const [what, bytes, re] of cases) {
    const d = join(dir, what.replace(/\W/g, '_'));
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'model.safetensors'), bytes);
    await assert.rejects(openCheckpoint(dirFiles(d), d), (e) => e instanceof WeightsError && re.test(e.message), what);
  }
  // over HTTP, a file shorter than its header says
  const s = await serve({ 'model.safetensors': file.subarray(0, file.length - 100) });
  servers.push(s);
  await assert.rejects(openCheckpoint(httpFiles(s.base, ['model.safetensors']), s.base), /exceed the data section/);
  // a sharded checkpoint whose index names a shard that is not there
  const sh = join(dir, 'shards');
  mkdirSync(sh);
  const src = join(ROOT, 'tests/data/mamba1_f16_sharded');
  const index = JSON.parse(readFileSync(join(src, 'model.safetensors.index.json'), 'utf8'));
  for (const f of new Set(Object.values(index.weight_map))) copyFileSync(join(src, f), join(sh, f));
  const first = Object.keys(index.weight_map)[0];
  index.weight_map[first] = 'model-00009-of-00003.safetensors';
  writeFileSync(join(sh, 'model.safetensors.index.json'), JSON.stringify(index));
  await assert.rejects(openCheckpoint(dirFiles(sh), sh), /shard 'model-00009-of-00003.safetensors'/);
});

// Tensor names the C reader refuses (runtime/weights/safetensors.c) are
// refused here too: a NUL (a hole in a C string), bytes that are not UTF-8,
// an escaped lone surrogate, a raw control character. Each file is also
// given to ssmc, whose message is checked.
test('tensor names with a NUL, bad UTF-8, a lone surrogate or a control character: refused as by the C reader', async () => {
  const good = 'backbone.norm_f.weight';
  const cases = [ // [what, the name (same length), this reader's message, the C reader's]
    ['NUL', 'backbon\\u0000_f.weight', /tensor "backbon\\u0000_f.weight": the name holds a NUL character/,
     /tensor entry \d+ of the header \(at byte \d+\): the name holds a NUL character/],
    ['not UTF-8', 'backbone.norm_f.weigh\xff', /header is not valid UTF-8 \(at byte \d+\)/,
     /tensor entry \d+ of the header \(at byte \d+\): the name is not valid UTF-8/],
    ['lone surrogate', 'backbone.norm_\\ud800ht', /header is not valid JSON \(a lone surrogate\)/,
     /header is not valid JSON/],
    ['control', 'backbone.norm_f.weigh\t', /header is not valid JSON/,
     /tensor entry \d+ of the header \(at byte \d+\): the name holds a raw control character/],
  ];
  for (const [what, name, re, reC] of cases) {
    assert.equal(name.length, good.length);
    const d = join(dir, `name_${what.replace(/\W/g, '_')}`);
    mkdirSync(d, { recursive: true });
    writeFileSync(join(d, 'model.safetensors'), Buffer.from(file.toString('latin1').replace(good, name), 'latin1'));
    copyFileSync(join(FIX, 'config.json'), join(d, 'config.json'));
    await assert.rejects(openCheckpoint(dirFiles(d), d), (e) => e instanceof WeightsError && re.test(e.message), what);
    assert.throws(() => ssmc(['run', d, '--backend', 'cpu', '--tokens', '1', '-n', '1', '-q']),
                  (e) => reC.test(e.stderr), `${what} (ssmc)`);
  }
});

test("weights that do not fit the bundle: the tensor is named", async () => {
  const b = compile(FIX, dir, 'm1', ['--chunk', '4']);
  const bundle = readBundle(readFileSync(b), b);
  const other = join(ROOT, 'tests/data/mamba1_untied');
  const ck = await openCheckpoint(dirFiles(other), other);
  await assert.rejects(Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint: ck }),
                       /tensor 'backbone\.[\w.]+' has shape \[[\d,]+\] in the checkpoint but the model expects \[[\d,]+\]/);
  // the final norm renamed (same length, so the header keeps its size)
  const miss = join(dir, 'missing');
  mkdirSync(miss);
  writeFileSync(join(miss, 'model.safetensors'), Buffer.from(file.toString('latin1').replace('backbone.norm_f.weight', 'backbone.norm_g.weight'), 'latin1'));
  const ck2 = await openCheckpoint(dirFiles(miss), miss);
  await assert.rejects(Runtime.open({ gpu: await nodeGpu(), bundle, checkpoint: ck2 }),
                       new RegExp(`tensor 'backbone.norm_f.weight' not found in ${miss}`));
  await ck.close();
  await ck2.close();
});

// A bundle records the config.json it was compiled with; weights whose
// config.json differs are refused before anything runs, in the words of the
// C runtime, and Python's Infinity in config.json reads as base/json.c reads it.
test("weights of another model's config: refused, naming what differs", async () => {
  const b = compile(FIX, dir, 'm1cfg', ['--chunk', '4']);
  const falcon = join(ROOT, 'tests/data/falcon_tiny');
  const r = spawnSync(process.execPath, [join(WEB, 'ssmc-web.mjs'), 'run', b, '--weights', falcon, '--tokens', '1,2', '-n', '2'],
                      { encoding: 'utf8' });
  assert.equal(r.status, 1);
  assert.match(r.stderr, /the weights \S+falcon_tiny are not of the model it was compiled for: \S+config\.json differs from the config it was compiled with \(model_type is "falcon_mamba", not "mamba"[;)]/);
  const c = spawnSync(SSMC, ['run', b, '--weights', falcon, '--tokens', '1,2', '-n', '2', '-q'], { encoding: 'utf8' });
  assert.equal(c.stderr.replace(/^ssmc: /, ''), r.stderr.replace(/^ssmc-web: /, ''));

  const m2 = join(ROOT, 'tests/data/mamba2_tiny');
  const text = readFileSync(join(m2, 'config.json'), 'utf8');
  assert.match(text, /Infinity/);
  const b2 = readBundle(readFileSync(compile(m2, dir, 'm2cfg', ['--chunk', '4'])), 'm2cfg.ssmb');
  assert.ok(b2.manifest.config && Object.keys(b2.manifest.config).length > 3);
  checkConfig(b2, text, 'config.json', m2); // its own: no error
  const changed = text.replace(/"state_size": *\d+/, '"state_size": 3');
  assert.notEqual(changed, text);
  assert.throws(() => checkConfig(b2, changed, 'config.json', m2),
                (e) => e instanceof BundleError && /state_size is 3, not \d+/.test(e.message));
});

// Stacked expert weights: 'name.{*}.x' is the parts name.0.x, name.1.x, ...
// placed one after another, the first dim counting them (ssm_st_read's
// rule), read the same from a file and over HTTP; a missing or misshapen
// part is named, and a stored name holding "{*}" is refused at open.
test('stacked weights ({*}): the parts one after another, from a file and over HTTP', async () => {
  const moe = join(ROOT, 'tests/data/jamba_moe');
  const bytes = readFileSync(join(moe, 'model.safetensors'));
  const s = await serve({ 'model.safetensors': bytes });
  servers.push(s);
  const local = await openCheckpoint(dirFiles(moe), moe);
  const remote = await openCheckpoint(httpFiles(s.base, ['model.safetensors']), s.base);
  const stacked = 'model.layers.1.feed_forward.experts.{*}.down_proj.weight';
  const part = (k) => stacked.replace('{*}', String(k));
  const shape = local.tensors.get(part(0)).shape;
  let parts = 0;
  while (local.tensors.has(part(parts))) parts++;
  assert.ok(parts >= 2, `${parts} experts`);
  const want = new Float32Array(parts * shape[0] * shape[1]);
  for (let k = 0; k < parts; k++) want.set(await local.readF32(part(k), shape), k * shape[0] * shape[1]);
  const got = await local.readF32(stacked, [parts, ...shape]);
  assert.deepEqual(got, want);
  assert.notDeepEqual(got.subarray(0, want.length / parts), got.subarray(want.length / parts, 2 * want.length / parts));
  assert.deepEqual(await remote.readF32(stacked, [parts, ...shape]), want);
  await assert.rejects(local.readF32(stacked, [parts + 1, ...shape]),
                       new RegExp(`part ${parts} of stacked tensor '${stacked.replace(/[.{}*]/g, '\\$&')}': tensor '${part(parts).replace(/\./g, '\\.')}' not found`));
  await assert.rejects(local.readF32(stacked, [parts, shape[1], shape[0]]),
                       /part 0 of stacked tensor '.*': tensor '.*experts\.0\.down_proj\.weight' has shape \[\d+,\d+\] in the checkpoint but the model expects/);
  await assert.rejects(local.readF32(stacked, [parts * shape[0] * shape[1]]), /stacked tensor '.*' needs a shape \[parts, \.\.\.\], not rank 1/);
  await local.close();
  // a stored name with the hole in it (same length, so the header keeps its size)
  const d = join(dir, 'holed');
  mkdirSync(d);
  writeFileSync(join(d, 'model.safetensors'), Buffer.from(bytes.toString('latin1').replace('experts.1.down_proj', 'experts{*}down_proj'), 'latin1'));
  await assert.rejects(openCheckpoint(dirFiles(d), d), /tensor '.*experts\{\*\}down_proj.weight': the name holds "\{\*\}"/);
});

// A quantized bundle's weights file (ssmc compile --dtype q4_0|q8_0 writes
// it beside the bundle; export-web ships it): every quantized weight read
// as it is stored gives the bytes the host makes quantizing the
// checkpoint's floats, stacked experts and a partial last block included,
// and a scale that is not finite is refused, naming it.
for (const [fixture, dt] of [['jamba_moe', 'q4_0'], ['mamba1_tiny', 'q8_0']]) {
  test(`${fixture} ${dt}: the weights file holds the bytes the host would quantize`, async () => {
    const src = join(ROOT, 'tests/data', fixture);
    const b = compile(src, dir, `wf-${fixture}`, ['--dtype', dt]);
    const m = readBundle(readFileSync(b), b).manifest;
    const wdir = join(dir, `wf-${fixture}`);
    mkdirSync(wdir, { recursive: true });
    copyFileSync(join(dir, `wf-${fixture}.${dt}.safetensors`), join(wdir, 'model.safetensors'));
    const stored = await openCheckpoint(dirFiles(wdir), wdir), floats = await openCheckpoint(dirFiles(src), src);
    let quantized = 0;
    for (const w of m.weights) {
      if (!w.dtype.startsWith('q')) {
        assert.equal(await stored.readQuant(w.name, w.shape, dt), null);
        // stored in the bundle's dtype: what the host makes of the floats
        const a = await stored.readF32(w.name, w.shape), f = await floats.readF32(w.name, w.shape);
        if (w.dtype === 'f32') assert.deepEqual(a, f, w.name);
        else assert.deepEqual(toHalf(w.dtype, a), toHalf(w.dtype, f), w.name);
        continue;
      }
      const got = await stored.readQuant(w.name, w.shape, w.dtype);
      assert.ok(got, `${w.name} is stored quantized`);
      assert.deepEqual(got, toQuant(await floats.readF32(w.name, w.shape), w.shape, w.dtype), w.name);
      assert.equal(await floats.readQuant(w.name, w.shape, w.dtype), null);
      quantized++;
    }
    assert.ok(quantized >= 3, `${quantized} quantized weights`);
    // the blocks are not floats
    const q = m.weights.find((w) => w.dtype === dt);
    const { q: qn, d: dn } = quantNames(q.name, dt);
    await assert.rejects(stored.readF32(qn, stored.tensors.get(qn).shape),
                         new RegExp(`tensor '${qn.replace(/[.*]/g, '\\$&')}' is ${dt === 'q8_0' ? 'I8' : 'U8'} in`));
    await stored.close();
    await floats.close();
    // scale 1 made +inf
    const bytes = readFileSync(join(wdir, 'model.safetensors'));
    const hlen = Number(bytes.readBigUInt64LE(0)), t = JSON.parse(bytes.subarray(8, 8 + hlen).toString())[dn];
    bytes.writeUInt16LE(0x7c00, 8 + hlen + t.data_offsets[0] + 2);
    writeFileSync(join(wdir, 'model.safetensors'), bytes);
    const bad = await openCheckpoint(dirFiles(wdir), wdir);
    await assert.rejects(bad.readQuant(q.name, q.shape, dt), new RegExp(`scale 1 is not finite`));
    await bad.close();
  });
}
