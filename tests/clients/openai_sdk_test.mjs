// The HTTP API through OpenAI's own Node SDK (tests/clients/package.json,
// installed by scripts/install-deps.sh), as a user calls it, against a
// `sluice serve` this test starts (reference stages): images.generate,
// images.edit with a PNG (and sluice's strength and seed), and the SDK's
// typed error for what sluice refuses.
//
// Run: SLUICE_BIN=build/bin/sluice node --test tests/clients/openai_sdk_test.mjs
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';

import { startServe, stopServe } from './serve_process.mjs';

let OpenAI, toFile;
try {
  ({ default: OpenAI, toFile } = await import('openai'));
} catch (e) {
  throw new Error('the openai package is missing: run scripts/install-deps.sh (' + e.message + ')');
}

const SLUICE = process.env.SLUICE_BIN;
assert.ok(SLUICE, 'SLUICE_BIN must name the sluice binary');
const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const PICTURE = readFileSync(join(ROOT, 'tests', 'golden', 'reference_torch_128.png'));

// Width and height from a PNG's IHDR.
function pngSize(bytes) {
  assert.equal(bytes.subarray(1, 4).toString(), 'PNG');
  return [bytes.readUInt32BE(16), bytes.readUInt32BE(20)];
}

let serve, client;
before(async () => {
  serve = await startServe(SLUICE, []);
  client = new OpenAI({ baseURL: serve.url + '/v1', apiKey: 'unused', maxRetries: 0 });
});
after(async () => { await stopServe(serve); });

test('images.generate answers a PNG of the size asked', async () => {
  const r = await client.images.generate({
    prompt: 'a small red circle on the left on a blue background', size: '128x128',
    response_format: 'b64_json',
  });
  assert.equal(r.data.length, 1);
  assert.deepEqual(pngSize(Buffer.from(r.data[0].b64_json, 'base64')), [128, 128]);
});

test('images.edit takes a PNG and sluice fields, twice the same bytes', async () => {
  const edit = async () => client.images.edit({
    image: await toFile(PICTURE, 'in.png', { type: 'image/png' }),
    prompt: 'a large green circle on the left on a blue background',
    size: '128x128', response_format: 'b64_json', strength: 0.6, seed: 2, steps: 12,
  });
  const a = await edit(), b = await edit();
  const png = Buffer.from(a.data[0].b64_json, 'base64');
  assert.deepEqual(pngSize(png), [128, 128]);
  assert.equal(a.data[0].b64_json, b.data[0].b64_json, 'an edit is deterministic');
  assert.notEqual(png.toString('base64'), PICTURE.toString('base64'), 'the picture was redrawn');
});

test('what sluice refuses is the SDK BadRequestError naming the field', async () => {
  await assert.rejects(
    client.images.edit({
      image: await toFile(PICTURE, 'in.png', { type: 'image/png' }),
      mask: await toFile(PICTURE, 'mask.png', { type: 'image/png' }),
      prompt: 'x', size: '128x128',
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'mask');
  await assert.rejects(
    client.images.edit({
      image: await toFile(Buffer.from('not a png'), 'in.png', { type: 'image/png' }),
      prompt: 'x', size: '128x128',
    }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'image');
});
