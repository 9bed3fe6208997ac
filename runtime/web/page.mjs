// page.mjs — the page of an exported site (index.html): loads site.json, the
// bundle, the tokenizer and the weights (by HTTP Range requests on the
// .safetensors, kept in Cache Storage so a reload downloads nothing), opens
// the WebGPU runtime with a progress bar, and streams generated text with
// tokens/s; Stop ends a generation after the token being drawn. The state
// (#state: loading, compiling, ready, generating, done, stopped, error,
// no-webgpu) says what it does; without WebGPU, #nogpu says how to get it.
// The model's generation_config.json (in site.json) gives the defaults, as
// it gives ssmc run: its end-of-text ids, its temperature in the field, and
// its other sampler settings.
// ?prompt=TEXT&n=N&autorun=1 runs once and reports on the console (see
// index.html).

import { readBundle } from './bundle.mjs';
import { openCheckpoint, httpFiles } from './safetensors.mjs';
import { Runtime } from './gpu.mjs';
import { Session } from './session.mjs';
import { Tokenizer, StreamDecoder } from './tokenizer.mjs';
import { readGenerationConfig } from './genconfig.mjs';

const $ = (id) => document.getElementById(id);
const params = new URLSearchParams(location.search);
const autorun = params.get('autorun') === '1';
const status = (text) => ($('status').textContent = text);
const mb = (n) => `${(n / 1e6).toFixed(1)} MB`;

function setState(state) {
  $('state').dataset.state = state;
  $('state').textContent = state.replace('-', ' ');
}

class NoWebGPU extends Error {}

async function fetchOk(url) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status} ${res.statusText}`);
  return res;
}

// Where the weights' bytes came from so far.
function origin(downloaded, cached) {
  if (!cached) return `${mb(downloaded)} downloaded`;
  if (!downloaded) return `${mb(cached)} read from this browser's cache, nothing downloaded`;
  return `${mb(downloaded)} downloaded, ${mb(cached)} read from this browser's cache`;
}

async function load() {
  if (!navigator.gpu) throw new NoWebGPU('This browser has no navigator.gpu.');
  if (!(await navigator.gpu.requestAdapter({ powerPreference: 'high-performance' })))
    throw new NoWebGPU('It has navigator.gpu, but no WebGPU adapter.');
  const site = await (await fetchOk('site.json')).json();
  $('title').textContent = `${site.title} (${site.architecture})`;
  document.title = `ssmc: ${site.title}`;
  status('loading the bundle and the tokenizer…');
  const bundle = readBundle(new Uint8Array(await (await fetchOk(site.bundle)).arrayBuffer()), site.bundle);
  const tokenizer = new Tokenizer(await (await fetchOk(site.tokenizer)).text(), site.tokenizer);
  const generation = readGenerationConfig(site.generation_config ? JSON.stringify(site.generation_config) : null,
                                          'generation_config.json', bundle.manifest.vocab);
  if (generation.sampling.temperature !== undefined) $('temperature').value = generation.sampling.temperature;
  const cache = globalThis.caches ? await caches.open('ssmc-weights') : null;
  let downloaded = 0, cached = 0;
  const files = httpFiles(new URL('.', location.href).href, site.weights, {
    cache, onBytes: (n) => (downloaded += n), onCached: (n) => (cached += n),
  });
  const checkpoint = await openCheckpoint(files, 'weights');
  const rt = await Runtime.open({
    gpu: navigator.gpu, bundle, checkpoint,
    onProgress: (done, total) => {
      $('progress').max = total;
      $('progress').value = done;
      status(`loading weights: ${mb(done)} of ${mb(total)} (${origin(downloaded, cached)})`);
    },
    onKernels: () => {
      status(`compiling ${bundle.manifest.kernels.length} kernels (weights: ${origin(downloaded, cached)})…`);
      setState('compiling');
    },
  });
  status(`ready: ${rt.deviceName}; weights ${mb(bundle.manifest.weights.reduce((a, w) => a + w.region.bytes, 0))}: ` +
         origin(downloaded, cached));
  setState('ready');
  return { site, rt, tokenizer, generation, session: new Session(rt) };
}

// Generates up to n tokens after `prompt`; resolves to the text and whether
// Stop ended it (stop() says whether to stop, asked after each token).
async function generate(m, prompt, n, temperature, seed, stop) {
  const ids = m.tokenizer.encode(prompt);
  if (!ids.length) throw new Error('the prompt has no tokens');
  await m.rt.reset();
  const dec = new StreamDecoder(m.tokenizer, true);
  let text = prompt, count = 0, stopped = false;
  $('out').textContent = text;
  const t0 = performance.now();
  await m.session.generate(ids, n, {
    ...m.generation.sampling, temperature, seed, batch: 8,
    eos: m.generation.eos.length ? m.generation.eos : m.site.eos,
    onToken: (id) => {
      text += dec.feed(id);
      count++;
      $('out').textContent = text;
      $('speed').textContent = `${count} tokens, ${(count / ((performance.now() - t0) / 1e3)).toFixed(1)} tokens/s`;
      return (stopped = count < n && stop());
    },
  });
  text += dec.flush();
  $('out').textContent = text;
  return { text, stopped };
}

async function main() {
  let m;
  try {
    m = await load();
  } catch (e) {
    if (e instanceof NoWebGPU) {
      setState('no-webgpu');
      $('nogpu-why').textContent = e.message;
      $('nogpu').hidden = false;
      status('');
    } else {
      setState('error');
      status(`error: ${e.message}`);
    }
    if (autorun) {
      console.log(`ssmc:error ${e.message}`);
      window.close();
    }
    return;
  }
  const go = $('go'), stopButton = $('stop');
  let stopAsked = false;
  const run = async () => {
    go.disabled = true;
    stopButton.disabled = false;
    stopAsked = false;
    setState('generating');
    status(`generating on ${m.rt.deviceName}…`);
    try {
      const temperature = Math.max(0, Number($('temperature').value) || 0);
      const seed = Math.min(16777215, Math.max(0, Math.floor(Number($('seed').value) || 0)));
      const n = Math.max(1, Number($('n').value) || 1);
      const r = await generate(m, $('prompt').value, n, temperature, seed, () => stopAsked);
      setState(r.stopped ? 'stopped' : 'done');
      status(r.stopped ? 'stopped: Generate starts again from the prompt' : `done on ${m.rt.deviceName}`);
      return r.text;
    } catch (e) {
      setState('error');
      throw e;
    } finally {
      go.disabled = false;
      stopButton.disabled = true;
    }
  };
  go.addEventListener('click', () => run().catch((e) => status(`error: ${e.message}`)));
  stopButton.addEventListener('click', () => {
    stopAsked = true;
    stopButton.disabled = true;
  });
  go.disabled = false;
  if (!autorun) return;
  if (params.has('prompt')) $('prompt').value = params.get('prompt');
  if (params.has('n')) $('n').value = params.get('n');
  try {
    const text = await run();
    console.log(`ssmc:done ${JSON.stringify(text)}`);
  } catch (e) {
    status(`error: ${e.message}`);
    console.log(`ssmc:error ${e.message}`);
  }
  window.close();
}

main();
