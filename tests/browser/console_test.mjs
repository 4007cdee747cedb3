// The web console in a real browser: Debian's headless Chromium driven by
// playwright-core (tests/browser/package.json; no browser download) against
// `sluice serve` clusters this test starts. The console loads and lists the
// pools, the playground submits a job whose preview and result appear (and
// edits a picture), a job is cancelled from its view, and with API keys the
// console refuses to show anything until it is given a key the server
// accepts.
//
// Run: SLUICE_BIN=build/bin/sluice node --test tests/browser/console_test.mjs
// SLUICE_SCREENSHOTS=DIR also writes the console's screenshots there.
import assert from 'node:assert/strict';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';

import { startServe as start, stopServe } from '../clients/serve_process.mjs';

let chromium;
try {
  ({ chromium } = await import('playwright-core'));
} catch (e) {
  throw new Error('playwright-core is missing: run scripts/install-deps.sh (' + e.message + ')');
}

const SLUICE = process.env.SLUICE_BIN;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const SHOTS = process.env.SLUICE_SCREENSHOTS || '';
const KEY = 'sk-console-test-0123456789';
// The shipped LoRA adapters (the playground offers them; read in place).
const ADAPTERS = new URL('../../models/adapters', import.meta.url).pathname;
// The golden picture (a red circle on the left), edited by the playground.
const PICTURE = new URL('../golden/reference_torch_128.png', import.meta.url).pathname;
assert.ok(SLUICE, 'SLUICE_BIN must name the sluice binary');
const startServe = (args) => start(SLUICE, args);

async function shot(page, name) {
  if (SHOTS) await page.screenshot({ path: join(SHOTS, name + '.png'), fullPage: true });
}

let browser;
before(async () => {
  browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox'] });
});
after(async () => {
  await browser?.close();
});

describe('an open API', () => {
  let serve, page;
  const errors = [];
  before(async () => {
    serve = await startServe(['--steps', '12', '--adapters', ADAPTERS]);
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(serve.url + '/console');
  });
  after(async () => {
    await page?.close();
    await stopServe(serve);
  });

  test('the console loads and lists every pool with its workers', async () => {
    const row = (stage) => page.locator(`[data-model="sluice-reference"] tr[data-stage="${stage}"]`);
    await row('decode').waitFor({ timeout: 15000 });
    assert.equal(await row('encode').locator('td.workers').textContent(), '1');
    assert.equal(await row('denoise').locator('td.workers').textContent(), '2');
    assert.equal(await row('decode').locator('td.workers').textContent(), '1');
    assert.equal(await row('denoise').locator('td').nth(1).textContent(), 'admission');
    assert.equal(await page.locator('#live').textContent(), 'live');
  });

  test('the playground submits a job whose previews and result appear', async () => {
    await page.click('nav button[data-view="playground"]');
    await page.fill('#play-prompt', 'a small green square at the top on a white background');
    await page.fill('#play-seed', '7');
    await page.fill('#play-preview', '2');
    await page.fill('#play-step-cache', '0.2');
    await page.selectOption('#play-lora', 'mirror');
    const curl = await page.locator('#snippet-curl').textContent();
    assert.match(curl, /"lora":\[\{"name":"mirror"\}\]/);
    assert.match(curl, /\/v1\/images\/generations/);
    assert.match(curl, /"seed":7/);
    assert.match(curl, /"step_cache":\{"threshold":0.2\}/);
    const sdk = await page.locator('#snippet-sdk').textContent();
    assert.match(sdk, /client\.images\.generate\(/);
    assert.match(sdk, /"step_cache": \{"threshold":0.2\}/);
    await page.click('#play-submit');
    // The jobs view follows the new job to its end.
    await page.locator('#job-status.succeeded').waitFor({ timeout: 60000 });
    const preview = await page.locator('#job-preview').getAttribute('src');
    assert.match(preview, /^data:image\/png;base64,/);
    assert.match(await page.locator('#job-preview-step').textContent(), /step \d+ \/ 12/);
    const result = page.locator('#job-result-image');
    await result.waitFor({ timeout: 15000 });
    await page.waitForFunction(() => document.getElementById('job-result-image').naturalWidth > 0);
    const [w, h] = await result.evaluate((img) => [img.naturalWidth, img.naturalHeight]);
    assert.ok(w >= 64 && h >= 64, `result ${w}x${h}`);
    // The timeline names each stage's worker, in pipeline order.
    const started = await page.locator('#job-timeline tr.ev-stage_started').allTextContents();
    assert.equal(started.length, 3, started.join('\n'));
    ['encode', 'denoise', 'decode'].forEach((s, i) => assert.match(started[i], new RegExp(s + 'worker \\d+')));
    // Denoise's stage_done row says what the step cache skipped.
    const done = await page.locator('#job-timeline tr.ev-stage_done', { hasText: 'denoise' }).textContent();
    assert.match(done, /12 steps, [1-9]\d* skipped by the step cache/);
    assert.match(done, /adapter_loads 1/);
    // The list shows it, succeeded.
    const id = await page.locator('#job-title').textContent();
    await page.locator(`#job-list tr[data-job="${id}"] .status.succeeded`).waitFor({ timeout: 5000 });
    await shot(page, 'console-job');
  });

  test('a running job is cancelled from its view', async () => {
    // A long video (200 steps), submitted by another client.
    const r = await fetch(serve.url + '/v1/videos', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ prompt: 'a red circle moving right', steps: 200, priority: 'batch' }),
    });
    assert.equal(r.status, 200);
    const { id } = await r.json();
    await page.click('nav button[data-view="jobs"]');
    await page.locator(`#job-list tr[data-job="${id}"]`).click({ timeout: 10000 });
    await page.locator('#job-title', { hasText: id }).waitFor();
    await page.click('#job-cancel');
    await page.locator('#job-status.cancelled').waitFor({ timeout: 10000 });
    const job = await (await fetch(serve.url + '/v1/jobs/' + id)).json();
    assert.equal(job.status, 'cancelled');
  });

  test('the cluster view follows the jobs live', async () => {
    await page.click('nav button[data-view="cluster"]');
    const count = (name) => page.locator(`[data-counter="${name}"] b`);
    await page.waitForFunction(() =>
      document.querySelector('[data-counter="cancelled"] b')?.textContent === '1', null,
    { timeout: 10000 });
    assert.equal(await count('submitted').textContent(), '2');
    assert.equal(await count('succeeded').textContent(), '1');
    // The store, as its master answers: memory in use, and the encoder's
    // cached conditions in their class.
    await page.locator('#store [data-tier="memory"]').waitFor({ timeout: 10000 });
    assert.match(await page.locator('#store [data-tier="memory"] b').textContent(), /\/ \d/);
    await page.locator('#store tr[data-class="condition"]').waitFor({ timeout: 10000 });
    assert.ok(Number(await page.locator('#store tr[data-class="condition"] td.objects').textContent()) >= 1);
    await shot(page, 'console-cluster');
  });

  test('the playground edits a picture', async () => {
    await page.click('nav button[data-view="playground"]');
    await page.fill('#play-prompt', 'a large green circle on the left on a blue background');
    await page.fill('#play-seed', '2');
    await page.fill('#play-step-cache', '');
    await page.selectOption('#play-lora', '');
    await page.setInputFiles('#play-picture', PICTURE);
    await page.fill('#play-strength', '0.6');
    const curl = await page.locator('#snippet-curl').textContent();
    assert.match(curl, /\/v1\/images\/edits/);
    assert.match(curl, /-F 'image=@reference_torch_128\.png'/);
    assert.match(curl, /-F 'strength=0\.6'/);
    const sdk = await page.locator('#snippet-sdk').textContent();
    assert.match(sdk, /client\.images\.edit\(\n {4}image=open\("reference_torch_128\.png", "rb"\),/);
    await page.click('#play-submit');
    const title = page.locator('#job-title');
    await page.locator('#job-status.succeeded').waitFor({ timeout: 60000 });
    const id = await title.textContent();
    const job = await (await fetch(serve.url + '/v1/jobs/' + id)).json();
    assert.equal(job.status, 'succeeded');
    // The edit redrew the red circle green where it was (pixel (28, 64)).
    const png = Buffer.from(await (await fetch(serve.url + '/v1/jobs/' + id + '/content')).arrayBuffer());
    const [r, g] = await page.evaluate(async (b64) => {
      const img = new Image();
      img.src = 'data:image/png;base64,' + b64;
      await img.decode();
      const c = document.createElement('canvas');
      c.width = img.width;
      c.height = img.height;
      const ctx = c.getContext('2d');
      ctx.drawImage(img, 0, 0);
      return Array.from(ctx.getImageData(28, 64, 1, 1).data);
    }, png.toString('base64'));
    assert.ok(g > 120 && r < 100, `pixel (28, 64) is ${r},${g}: not green`);
    // Without a picture the form is a plain generation again.
    await page.click('nav button[data-view="playground"]');
    await page.setInputFiles('#play-picture', []);
    assert.match(await page.locator('#snippet-curl').textContent(), /\/v1\/images\/generations/);
  });

  test('the page raised no script error', () => {
    assert.deepEqual(errors, []);
  });
});

describe('an API with keys', () => {
  let serve, page;
  const errors = [];
  before(async () => {
    const dir = mkdtempSync(join(tmpdir(), 'sluice-console-'));
    writeFileSync(join(dir, 'keys.yaml'), `keys:\n  ${KEY}: ops\n`, { mode: 0o600 });
    serve = await startServe(['--api-keys', join(dir, 'keys.yaml')]);
    page = await browser.newPage();
    page.on('pageerror', (e) => errors.push(String(e)));
    await page.goto(serve.url + '/console');
  });
  after(async () => {
    await page?.close();
    await stopServe(serve);
  });

  test('shows nothing without a key, refuses a wrong one, then shows the pools', async () => {
    await page.locator('#auth').waitFor({ state: 'visible', timeout: 15000 });
    assert.equal(await page.locator('#live').textContent(), 'needs a key');
    assert.equal(await page.locator('[data-model]').count(), 0);
    await page.fill('#auth-key', 'sk-not-the-key-0000000000');
    await page.click('#auth-form button');
    await page.locator('#auth-error', { hasText: 'That key was refused.' }).waitFor({ timeout: 10000 });
    assert.equal(await page.locator('[data-model]').count(), 0);
    await page.fill('#auth-key', KEY);
    await page.click('#auth-form button');
    await page.locator('[data-model="sluice-reference"] tr[data-stage="denoise"]').waitFor({ timeout: 15000 });
    assert.equal(await page.locator('#auth').isHidden(), true);
    // The key stays in the page's memory: nothing in storage or cookies.
    assert.equal(await page.evaluate(() => localStorage.length + sessionStorage.length), 0);
    assert.deepEqual(await page.context().cookies(), []);
    assert.deepEqual(errors, []);
  });
});
