// browser.test.mjs — the exported pymamba site in a real browser:
// `ssmc export-web` of models/pymamba, served by python3 -m http.server on
// 127.0.0.1 (a free port), opened in headless Chromium (Debian's, driven by
// playwright-core) with WebGPU on SwiftShader. The page must load, generate
// with ?prompt=&n=&autorun=1, and log "ssmc:done " + its text: the prompt
// and the continuation `ssmc run` gives on the Vulkan runtime. A screenshot
// of the page is kept in the build directory (web-artifacts/). A second page
// must generate again without asking the server for the weights (Cache
// Storage).

import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { compile, scratch, ssmc, ROOT, ARTIFACTS } from './helpers.mjs';

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

// Opens `url` in a new page of `context`; resolves to the page, the text of
// its "ssmc:done " line (or throws with its "ssmc:error "), and the URLs it
// requested.
async function runPage(context, url) {
  const page = await context.newPage();
  const requests = [];
  page.on('request', (r) => requests.push(r.url()));
  // window.close() is recorded, not done, so the page is still there to see
  await page.addInitScript(() => { window.close = () => { window.ssmcClosed = true; }; });
  const done = new Promise((resolve, reject) => {
    page.on('console', (m) => {
      const t = m.text();
      if (t.startsWith('ssmc:done ')) resolve(JSON.parse(t.slice('ssmc:done '.length)));
      if (t.startsWith('ssmc:error ')) reject(new Error(t));
    });
    page.on('pageerror', (e) => reject(e));
  });
  await page.goto(url);
  const text = await done;
  assert.equal(await page.evaluate(() => window.ssmcClosed), true, 'the page did not call window.close()');
  return { page, text, requests };
}

test('the exported pymamba site generates Python in headless Chromium', { timeout: 600000 }, async () => {
  assert.ok(CHROMIUM, 'no Chromium (tools/install-deps.sh --test installs Debian\'s chromium)');
  const { chromium } = await import('playwright-core');
  const dir = scratch();
  const bundle = compile(join(ROOT, 'models/pymamba'), dir, 'pymamba');
  const site = join(dir, 'site');
  ssmc(['export-web', bundle, '--weights', join(ROOT, 'models/pymamba'), '-o', site]);
  const base = await serve(site);
  const want = ssmc(['run', bundle, '--weights', join(ROOT, 'models/pymamba'), '--prompt', PROMPT, '-n', String(N)]).replace(/\n$/, '');

  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--enable-unsafe-webgpu', '--use-webgpu-adapter=swiftshader', '--enable-features=Vulkan'],
    env: { ...process.env, XDG_RUNTIME_DIR: process.env.XDG_RUNTIME_DIR ?? mkdtempSync(join(tmpdir(), 'xdg-')) },
  });
  cleanup.push(() => browser.close());
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

  // a reload: the weights come from Cache Storage
  const second = await runPage(context, url.replace(`n=${N}`, 'n=3'));
  assert.ok(want.startsWith(second.text), JSON.stringify(second.text));
  assert.deepEqual(second.requests.filter((u) => u.endsWith('/model.safetensors')), []);
});
