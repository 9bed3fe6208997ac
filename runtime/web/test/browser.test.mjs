// browser.test.mjs — the exported pymamba site in a real browser:
// `ssmc export-web` of models/pymamba, served by python3 -m http.server on
// 127.0.0.1 (a free port), opened in headless Chromium (Debian's, driven by
// playwright-core) with WebGPU on SwiftShader. The page must load, generate
// with ?prompt=&n=&autorun=1, and log "ssmc:done " + its text: the prompt
// and the continuation `ssmc run` gives on the Vulkan runtime. A screenshot
// of the page is kept in the build directory (web-artifacts/). A second page
// must generate again without asking the server for the weights (Cache
// Storage). The page goes through its states (loading, compiling, ready,
// generating, done), says where the weights came from, and Stop ends a long
// generation at once; without navigator.gpu it says how to get WebGPU.
// And the chat page of `ssmc serve` (serve/page/): its script loads without
// errors, a message round-trips with the server's own answer, Stop ends a
// reply and the server drops the request, and an error quotes the server.

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compile, scratch, ssmc, ROOT, ARTIFACTS, SSMC } from './helpers.mjs';

const CHROMIUM = ['/usr/lib/chromium/chromium', '/usr/bin/chromium'].find(existsSync);
const PROMPT = 'def fibonacci(n):';
const N = 8;
const cleanup = [];
after(() => cleanup.forEach((f) => f()));

// python3 -m http.server on a free port of 127.0.0.1; resolves to its URL.
function serve(dir) {
  return new Promise((resolve, reject) => {
    const p = spawn('python3', ['-u', '-m', 'http.server', '0', '--bind', '127.0.0.1', '-d', dir],
                    { stdio: ['ignore', 'pipe', 'pipe'] });
    cleanup.push(() => p.kill());
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = /port (\d+)/.exec(out);
      if (m) resolve(`http://127.0.0.1:${m[1]}/`);
    });
    p.on('exit', (code) => reject(new Error(`http.server exited (${code}): ${out}`)));
  });
}

// Headless Chromium with WebGPU on SwiftShader, launched once for the file.
let browserOnce = null;
function launch() {
  assert.ok(CHROMIUM, 'no Chromium (tools/install-deps.sh --test installs Debian\'s chromium)');
  browserOnce ??= import('playwright-core').then(async ({ chromium }) => {
    const b = await chromium.launch({
      executablePath: CHROMIUM,
      args: ['--no-sandbox', '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader', '--enable-features=Vulkan'],
      env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? mkdtempSync(join(tmpdir(), 'xdg-')) },
    });
    cleanup.push(() => b.close());
    return b;
  });
  return browserOnce;
}

// Opens `url` in a new page of `context`, then runs during(page) if given;
// resolves to the page, the text of its "ssmc:done " line (or throws with its
// "ssmc:error "), and the URLs it requested.
async function runPage(context, url, during = null) {
  const page = await context.newPage();
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  // window.close() is recorded, not done, so the page is still there to see;
  // every state #state takes is kept in window.ssmcStates, and the status
  // line with the state ready in window.ssmcReady
  await page.addInitScript(() => {
    window.close = () => { window.ssmcClosed = true; };
    window.ssmcStates = [];
    new MutationObserver((records) => {
      for (const r of records) {
        window.ssmcStates.push(r.target.dataset.state);
        if (r.target.dataset.state === 'ready') window.ssmcReady = document.getElementById('status').textContent;
      }
    }).observe(document, { subtree: true, attributes: true, attributeFilter: ['data-state'] });
  });
  const done = new Promise((resolve, reject) => {
    page.on('console', (m) => {
      const t = m.text();
      if (t.startsWith('ssmc:done ')) resolve(JSON.parse(t.slice('ssmc:done '.length)));
      if (t.startsWith('ssmc:error ')) reject(new Error(t));
    });
    page.on('pageerror', (e) => reject(e));
  });
  await page.goto(url);
  if (during) await during(page);
  const text = await done;
  assert.equal(await page.evaluate(() => window.ssmcClosed), true, 'the page did not call window.close()');
  return { page, text, requests };
}

test('the exported pymamba site generates Python in headless Chromium', { timeout: 600000 }, async () => {
  const dir = scratch();
  const bundle = compile(join(ROOT, 'models/pymamba'), dir, 'pymamba');
  const site = join(dir, 'site');
  ssmc(['export-web', bundle, '--weights', join(ROOT, 'models/pymamba'), '-o', site]);
  const base = await serve(site);
  const want = ssmc(['run', bundle, '--weights', join(ROOT, 'models/pymamba'), '--prompt', PROMPT, '-n', String(N)]).replace(/\n$/, '');

  const browser = await launch();
  const context = await browser.newContext({ viewport: { width: 1000, height: 760 } });
  const url = `${base}index.html?prompt=${encodeURIComponent(PROMPT)}&n=${N}&autorun=1`;
  const first = await runPage(context, url);
  assert.ok(first.text.startsWith(PROMPT) && first.text.length > PROMPT.length + 5, JSON.stringify(first.text));
  assert.equal(first.text, want, 'the page and ssmc run generate different text');
  assert.match(await first.page.textContent('#speed'), /^\d+ tokens, [\d.]+ tokens\/s$/);
  assert.equal(await first.page.getAttribute('#progress', 'value'), await first.page.getAttribute('#progress', 'max'));
  mkdirSync(ARTIFACTS, { recursive: true });
  await first.page.screenshot({ path: join(ARTIFACTS, 'pymamba-site.png'), fullPage: true });
  assert.ok(first.requests.some((u) => u.endsWith('/model.safetensors')));
  const states = await first.page.evaluate(() => window.ssmcStates);
  assert.deepEqual(states.filter((x, i) => x !== states[i - 1]), ['compiling', 'ready', 'generating', 'done']);
  assert.match(await first.page.textContent('#status'), /^done on /);
  assert.equal(await first.page.isDisabled('#stop'), true);

  // a reload: the weights come from Cache Storage; Stop, pressed as a
  // generation of 2000 tokens starts, ends it at its first token and gives
  // the buttons back
  const second = await runPage(context, url.replace(`n=${N}`, 'n=2000'), async (p) => {
    await p.waitForSelector('#state[data-state=generating]', { timeout: 120000 });
    await p.click('#stop');
  });
  assert.ok(want.startsWith(second.text) && second.text.length > PROMPT.length, JSON.stringify(second.text));
  assert.deepEqual(second.requests.filter((u) => u.endsWith('/model.safetensors')), []);
  const again = await second.page.evaluate(() => window.ssmcStates);
  assert.deepEqual(again.filter((x, i) => x !== again[i - 1]), ['compiling', 'ready', 'generating', 'stopped']);
  assert.match(await second.page.textContent('#speed'), /^1 tokens, /);
  assert.equal(await second.page.isDisabled('#go'), false);
  assert.equal(await second.page.isDisabled('#stop'), true);
  // where the weights came from, each time: all downloaded, then all from the cache
  const ready = async (r) => (await r.page.evaluate(() => window.ssmcReady)) ?? '';
  assert.match(await ready(first), /^ready: .*; weights [\d.]+ MB: [\d.]+ MB downloaded$/);
  assert.match(await ready(second), /: [\d.]+ MB read from this browser's cache, nothing downloaded$/);

  // no navigator.gpu: the page says how to get WebGPU, and downloads no weights
  const none = await context.newPage();
  const noneRequests = [];
  none.on('request', (r) => noneRequests.push(r.url()));
  await none.addInitScript(() => Object.defineProperty(Navigator.prototype, 'gpu', { get: () => undefined }));
  await none.goto(`${base}index.html`);
  await none.waitForSelector('#state[data-state=no-webgpu]');
  assert.match(await none.textContent('#nogpu'), /chrome:\/\/flags\/#enable-unsafe-webgpu[\s\S]*Safari Technology Preview[\s\S]*Firefox Nightly/);
  assert.equal(await none.isVisible('#nogpu'), true);
  assert.deepEqual(noneRequests.filter((u) => u.endsWith('.safetensors')), []);
});

test('the chat page of ssmc serve', { timeout: 120000 }, async () => {
  const server = spawn(SSMC, ['serve', join(ROOT, 'models/pymamba'), '--port', '0', '--backend', 'cpu', '--chat-template',
                              join(ROOT, 'tests/data/chat/nemotron-h-8b-reasoning-128k/chat_template.jinja')],
                       { stdio: ['ignore', 'ignore', 'pipe'] });
  cleanup.push(() => server.kill());
  const url = await new Promise((resolve, reject) => {
    let err = '';
    server.stderr.on('data', (d) => {
      err += d;
      const m = /a chat page at (http:\S+)/.exec(err);
      if (m) resolve(m[1]);
    });
    server.on('exit', (code) => reject(new Error(`ssmc serve exited (${code}): ${err}`)));
  });
  const metric = async (name) => Number(new RegExp(`^${name} (\\d+)$`, 'm').exec(await (await fetch(`${url}metrics`)).text())[1]);
  const page = await (await launch()).newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
  await page.goto(url);
  await page.waitForFunction(() => document.getElementById('model').textContent === 'pymamba');
  const settled = () => page.waitForFunction(() => document.getElementById('state').dataset.state !== 'generating');

  // a message round-trips: the streamed reply is the server's answer to it
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', '8');
  await page.fill('#input', 'Hello');
  await page.press('#input', 'Enter');
  await page.waitForSelector('#state[data-state=generating]');
  await settled();
  const want = await (await fetch(`${url}v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello' }], temperature: 0, max_tokens: 8 }),
  })).json();
  assert.equal(await page.getAttribute('#state', 'data-state'), 'idle', await page.textContent('#state'));
  assert.match(await page.textContent('#state'), /the last reply: 8 tokens/);
  assert.deepEqual(await page.$$eval('.msg', (m) => m.map((x) => [x.className, x.textContent])),
                   [['msg user', 'Hello'], ['msg assistant', want.choices[0].message.content]]);

  // Stop: the reply ends early, the server drops the request, the buttons come back
  await page.fill('#max-tokens', '1000');
  await page.fill('#input', 'Go on');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[1]?.textContent.length > 2);
  assert.equal(await page.isDisabled('#send'), true);
  await page.click('#stop');
  await settled();
  assert.equal(await page.getAttribute('#state', 'data-state'), 'stopped');
  assert.equal(await page.isDisabled('#send'), false);
  assert.equal(await page.isDisabled('#stop'), true);
  for (let i = 0; i < 50 && (await metric('ssmc_requests_cancelled_total')) < 1; i++) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await metric('ssmc_requests_cancelled_total'), 1);
  assert.equal(await metric('ssmc_requests_active'), 0);

  // an error quotes the server's message, and the message leaves the conversation
  await page.fill('#max-tokens', '5000');
  await page.fill('#input', 'Too long');
  await page.click('#send');
  await page.waitForSelector('#state[data-state=error]');
  assert.match(await page.textContent('#state'), /^error: max_tokens: expected an integer from 0 to 1024/);
  assert.equal(await page.$$eval('.msg.failed', (m) => m.length), 1);

  // New chat: an empty conversation
  await page.click('#new');
  assert.equal(await page.$$eval('.msg', (m) => m.length), 0);
  assert.equal(await page.getAttribute('#state', 'data-state'), 'idle');
  assert.deepEqual(errors.filter((e) => !/status of 400/.test(e)), []);
});
