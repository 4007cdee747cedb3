// sluice's web console: the cluster (live), jobs (list, timeline, previews,
// result, cancel) and a playground. Framework-free; talks only to the
// orchestrator that served it. An API key, when the API needs one, lives in
// this page's memory only.
'use strict';

const state = {
  key: '',             // The bearer key; never written to storage.
  job: null,           // The job shown in the detail pane (its public id).
  jobFeed: null,       // AbortController of that job's event stream.
  jobCounters: '',     // The cluster's job counters when the list was read.
  urls: [],            // Object URLs to revoke when the detail pane changes.
  models: [],
};

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

// --- The API -------------------------------------------------------------

class Unauthorized extends Error {}

// fetch with the key; a 401 asks for one and throws Unauthorized. Errors of
// the API (OpenAI's error object) throw with their message.
async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (state.key) headers.set('Authorization', 'Bearer ' + state.key);
  const r = await fetch(path, { ...options, headers });
  if (r.status === 401) {
    askForKey(state.key ? 'That key was refused.' : '');
    throw new Unauthorized('unauthorized');
  }
  if (!r.ok) {
    let message = r.status + ' ' + r.statusText;
    try {
      const body = await r.json();
      if (body.error && body.error.message) message = body.error.message;
    } catch (_) { /* Not JSON. */ }
    throw new Error(message);
  }
  return r;
}

// Reads server-sent events from `path` (fetch, so the key can go as a
// header, which EventSource cannot send) and calls onEvent(type, data) for
// each, until the stream ends or `signal` aborts.
async function readEvents(path, signal, onEvent) {
  const r = await api(path, { signal, headers: { Accept: 'text/event-stream' } });
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let type = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event: ')) type = line.slice(7);
        else if (line.startsWith('data: ')) data.push(line.slice(6));
      }
      if (data.length) onEvent(type, JSON.parse(data.join('\n')));
    }
  }
}

// --- Auth ----------------------------------------------------------------

let keyWaiters = [];

function askForKey(error) {
  $('auth').hidden = false;
  $('auth-error').textContent = error;
  $('auth-key').focus();
}

function keyGiven() {
  return new Promise((resolve) => keyWaiters.push(resolve));
}

$('auth-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  state.key = $('auth-key').value.trim();
  $('auth-key').value = '';
  $('auth').hidden = true;
  const waiters = keyWaiters;
  keyWaiters = [];
  waiters.forEach((w) => w());
});

// --- Views ---------------------------------------------------------------

function show(view) {
  for (const b of document.querySelectorAll('nav button')) {
    b.classList.toggle('active', b.dataset.view === view);
  }
  for (const v of document.querySelectorAll('.view')) v.hidden = v.id !== 'view-' + view;
  if (view === 'jobs') refreshJobs();
}

for (const b of document.querySelectorAll('nav button')) {
  b.addEventListener('click', () => show(b.dataset.view));
}

// --- Cluster (live) ------------------------------------------------------

function pct(x) {
  return Math.round(100 * x) + '%';
}

function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}

// The store as its master last answered: memory and disk, objects, and
// each cache class against its budget.
function renderStore(s) {
  if (!s) {
    $('store').replaceChildren();
    return;
  }
  const tier = (name, t) => el('div', { class: 'counter', 'data-tier': name },
    el('b', {}, bytes(t.used_bytes) + ' / ' + bytes(t.capacity_bytes)),
    el('meter', { min: 0, max: 1, value: t.capacity_bytes ? t.used_bytes / t.capacity_bytes : 0 }),
    el('span', {}, name));
  const counters = [tier('memory', s.memory)];
  if (s.disk.capacity_bytes) counters.push(tier('disk', s.disk));
  counters.push(el('div', { class: 'counter' }, el('b', {}, s.objects), el('span', {}, 'objects')),
    el('div', { class: 'counter' }, el('b', {}, s.nodes), el('span', {}, 'nodes')));
  const rows = Object.entries(s.cache_classes).map(([name, c]) => el('tr', { 'data-class': name },
    el('td', {}, name), el('td', { class: 'objects' }, c.objects), el('td', { class: 'bytes' }, bytes(c.bytes)),
    el('td', {}, c.budget_bytes ? bytes(c.budget_bytes) : 'shared')));
  $('store').replaceChildren(
    el('h2', {}, 'Store', s.answered ? '' : el('span', { class: 'error' }, ' (master not answering: as last seen)')),
    el('div', { class: 'counters' }, ...counters),
    rows.length ? el('table', { class: 'pools' },
      el('thead', {}, el('tr', {}, ...['cache class', 'objects', 'bytes', 'budget'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ...rows)) : el('p', { class: 'muted' }, 'No cache objects.'));
}

function renderCluster(c) {
  const j = c.jobs;
  $('counters').replaceChildren(
    ...[['submitted', j.submitted], ['running', j.running], ['in system', j.in_system],
      ['succeeded', j.succeeded], ['failed', j.failed], ['cancelled', j.cancelled],
      ['rejected', j.rejected]].map(([name, n]) =>
      el('div', { class: 'counter', 'data-counter': name.replace(' ', '_') },
        el('b', {}, n), el('span', {}, name))));
  const blocks = c.models.map((m) => {
    const rows = m.stages.map((s) => {
      const q = s.queued_by_class;
      const a = s.autoscale;
      return el('tr', { 'data-stage': s.stage, class: s.workers === 0 ? 'unserved' : '' },
        el('td', {}, s.stage), el('td', {}, s.kind), el('td', { class: 'workers' }, s.workers),
        el('td', {}, s.busy + ' / ' + s.slots), el('td', {}, s.credits), el('td', {}, s.reserved),
        el('td', { class: 'queued' }, s.queued),
        el('td', {}, q.interactive + ' / ' + q.standard + ' / ' + q.batch),
        el('td', {}, el('meter', { min: 0, max: 1, value: s.utilization }), ' ', pct(s.utilization)),
        el('td', {}, a ? a.recommended + ' (' + pct(a.utilization) + ' avg)' : '–'));
    });
    return el('div', { class: 'model', 'data-model': m.id },
      el('h2', {}, m.id),
      el('table', { class: 'pools' },
        el('thead', {}, el('tr', {}, ...['stage', 'kind', 'workers', 'busy', 'credits', 'reserved',
          'queued', 'i / s / b', 'utilisation', 'autoscale'].map((h) => el('th', {}, h)))),
        el('tbody', {}, ...rows)));
  });
  $('pools').replaceChildren(...(blocks.length ? blocks
    : [el('p', { class: 'muted' }, 'No model declared yet: start a worker.')]));
  renderStore(c.store);
  // The job list follows the counters (at most once per cluster event).
  const counters = JSON.stringify(j);
  if (counters !== state.jobCounters && !$('view-jobs').hidden) refreshJobs();
  state.jobCounters = counters;
}

async function followCluster() {
  for (;;) {
    try {
      $('live').textContent = 'live';
      $('live').className = 'live on';
      await readEvents('/v1/cluster/events', undefined, (type, data) => {
        if (type === 'cluster') renderCluster(data);
      });
    } catch (e) {
      if (e instanceof Unauthorized) {
        $('live').textContent = 'needs a key';
        $('live').className = 'live';
        await keyGiven();
        continue;
      }
    }
    $('live').textContent = 'reconnecting…';
    $('live').className = 'live';
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// --- Jobs ----------------------------------------------------------------

async function refreshJobs() {
  let list;
  try {
    list = await (await api('/v1/jobs?limit=50')).json();
  } catch (e) {
    return;
  }
  const rows = list.data.map((j) => el('tr', {
    'data-job': j.id, class: j.id === state.job ? 'selected' : '',
    onclick: () => openJob(j.id),
  },
  el('td', { class: 'mono' }, j.id), el('td', {}, j.kind), el('td', {}, j.model),
  el('td', {}, el('span', { class: 'status ' + j.status }, j.status)), el('td', {}, j.stage),
  el('td', {}, el('progress', { max: 1, value: j.progress.fraction }))));
  $('job-list').tBodies[0].replaceChildren(...rows);
  $('job-list-empty').hidden = rows.length > 0;
}

function clearDetail() {
  if (state.jobFeed) state.jobFeed.abort();
  state.urls.forEach((u) => URL.revokeObjectURL(u));
  state.urls = [];
  $('job-timeline').tBodies[0].replaceChildren();
  $('job-preview-box').hidden = true;
  $('job-result-box').hidden = true;
  $('job-result').replaceChildren();
  $('job-error').textContent = '';
}

function renderJob(j) {
  $('job-title').textContent = j.id;
  $('job-status').textContent = j.status;
  $('job-status').className = 'status ' + j.status;
  $('job-meta').textContent = j.kind + ' · ' + j.model +
    (j.ttff_ms !== undefined ? ' · first output ' + Math.round(j.ttff_ms) + ' ms' : '');
  $('job-progress').value = j.progress.fraction;
  const finished = ['succeeded', 'failed', 'cancelled'].includes(j.status);
  $('job-step').textContent = finished ? '' : j.progress.steps ? 'step ' + j.progress.step +
    ' / ' + j.progress.steps + ' of ' + j.stage : j.stage;
  $('job-cancel').hidden = finished;
  if (j.error) $('job-error').textContent = j.error;
}

// What a stage_done event's counts say: the steps a denoise ran and, with
// the step cache on, how many of them skipped the blocks; other counts as
// name and value.
function countsText(c) {
  const parts = [];
  if (c.steps !== undefined) {
    parts.push(c.steps + ' steps' + (c.steps_skipped !== undefined ? ', ' + c.steps_skipped +
      ' skipped by the step cache' : ''));
  }
  for (const [k, v] of Object.entries(c)) {
    if (k !== 'steps' && k !== 'steps_skipped') parts.push(k + ' ' + v);
  }
  return parts.join(', ');
}

function addEvent(e) {
  let detail = e.timings_ms ? Object.entries(e.timings_ms).map(([k, v]) =>
    k + ' ' + v.toFixed(1) + ' ms').join(', ') : (e.detail || (e.steps ? e.step + '/' + e.steps : ''));
  if (e.counts && Object.keys(e.counts).length) detail += ' · ' + countsText(e.counts);
  $('job-timeline').tBodies[0].append(el('tr', { class: 'ev-' + e.type },
    el('td', {}, e.t_ms.toFixed(1)), el('td', {}, e.type), el('td', {}, e.stage || ''),
    el('td', { class: 'mono' }, e.worker ? 'worker ' + e.worker : ''), el('td', {}, detail)));
  if (e.type === 'preview' && e.image) {
    $('job-preview').src = 'data:' + e.content_type + ';base64,' + e.image;
    $('job-preview-step').textContent = 'preview, step ' + e.step + ' / ' + e.steps;
    $('job-preview-box').hidden = false;
  }
  if (e.type === 'step') {
    $('job-step').textContent = 'step ' + e.step + ' / ' + e.steps + ' of ' + e.stage;
  }
}

async function showResult(j) {
  const path = j.kind === 'video' ? '/v1/videos/' + j.id + '/content' : '/v1/jobs/' + j.id + '/content';
  const r = await api(path);
  const type = r.headers.get('Content-Type') || '';
  const url = URL.createObjectURL(await r.blob());
  state.urls.push(url);
  let node;
  if (type.startsWith('image/')) node = el('img', { src: url, alt: 'result', id: 'job-result-image' });
  else if (type.startsWith('video/')) node = el('video', { src: url, controls: '', loop: '', id: 'job-result-video' });
  else node = el('a', { href: url, download: j.id }, 'download the result (' + type + ')');
  $('job-result').replaceChildren(node);
  $('job-result-box').hidden = false;
}

async function openJob(id) {
  clearDetail();
  state.job = id;
  for (const tr of $('job-list').tBodies[0].rows) tr.classList.toggle('selected', tr.dataset.job === id);
  $('job-detail').hidden = false;
  const feed = new AbortController();
  state.jobFeed = feed;
  try {
    renderJob(await (await api('/v1/jobs/' + id)).json());
    await readEvents('/v1/jobs/' + id + '/events', feed.signal, async (type, data) => {
      if (state.job !== id) return;
      if (type === 'end') {
        renderJob(data);
        if (data.status === 'succeeded') await showResult(data);
        refreshJobs();
        return;
      }
      addEvent(data);
      if (['stage_started', 'step', 'stage_done'].includes(type)) {
        renderJob(await (await api('/v1/jobs/' + id)).json());
      }
    });
  } catch (e) {
    if (e.name !== 'AbortError' && state.job === id) $('job-error').textContent = e.message;
  }
}

$('job-cancel').addEventListener('click', async () => {
  try {
    renderJob(await (await api('/v1/jobs/' + state.job, { method: 'DELETE' })).json());
  } catch (e) {
    $('job-error').textContent = e.message;
  }
});

// --- Playground ----------------------------------------------------------

// The request body the form describes (what curl and the SDK would send),
// and the picture to start from (a File; null: none): an image edit, or a
// video's reference picture, sent as a multipart form.
function playBody() {
  const video = $('play-kind').value === 'video';
  const picture = $('play-picture').files[0] || null;
  const b = { prompt: $('play-prompt').value };
  if ($('play-model').value) b.model = $('play-model').value;
  if ($('play-size').value.trim()) b.size = $('play-size').value.trim();
  const num = (id) => ($(id).value === '' ? undefined : Number($(id).value));
  const fields = { steps: num('play-steps'), guidance: num('play-guidance'), seed: num('play-seed'),
    preview_every: num('play-preview') };
  if (video) fields.frames = num('play-frames');
  const threshold = num('play-step-cache');
  if (threshold !== undefined) fields.step_cache = { threshold };
  if ($('play-lora').value) {
    const scale = num('play-lora-scale');
    fields.lora = [scale === undefined ? { name: $('play-lora').value }
      : { name: $('play-lora').value, scale }];
  }
  if (picture) fields.strength = num('play-strength');
  for (const [k, v] of Object.entries(fields)) if (v !== undefined) b[k] = v;
  b.priority = $('play-priority').value;
  return { video, body: b, picture };
}

// Where the form goes, and the form's file field for its picture.
function playTarget(video, picture) {
  if (video) return { path: '/v1/videos', field: 'input_reference' };
  return picture ? { path: '/v1/images/edits', field: 'image' }
    : { path: '/v1/images/generations', field: '' };
}

// `body` with `picture` as multipart form data: each field as text (JSON
// text for objects), the picture as the file part `field`.
function playForm(body, picture, field) {
  const form = new FormData();
  for (const [k, v] of Object.entries(body)) {
    form.append(k, typeof v === 'object' ? JSON.stringify(v) : String(v));
  }
  form.append(field, picture, picture.name || 'picture.png');
  return form;
}

function shellQuote(s) {
  return "'" + s.replace(/'/g, "'\\''") + "'";
}

function pyValue(v) {
  return typeof v === 'string' || typeof v === 'object' ? JSON.stringify(v) : String(v);
}

function renderSnippets() {
  const { video, body, picture } = playBody();
  const { path, field } = playTarget(video, picture);
  const auth = state.key ? ' \\\n  -H "Authorization: Bearer $SLUICE_API_KEY"' : '';
  if (picture) {
    const name = picture.name || 'picture.png';
    const parts = Object.entries(body).map(([k, v]) =>
      ' \\\n  -F ' + shellQuote(k + '=' + (typeof v === 'object' ? JSON.stringify(v) : String(v))));
    $('snippet-curl').textContent = 'curl ' + location.origin + path + auth +
      ' \\\n  -F ' + shellQuote(field + '=@' + name) + parts.join('');
  } else {
    $('snippet-curl').textContent = 'curl ' + location.origin + path + auth +
      ' \\\n  -H "Content-Type: application/json" \\\n  -d ' + shellQuote(JSON.stringify(body));
  }
  const openai = ['prompt', 'model', 'size'];
  const args = openai.filter((k) => k in body).map((k) => '    ' + k + '=' + pyValue(body[k]) + ',');
  if (picture) args.unshift('    ' + field + '=open(' + JSON.stringify(picture.name || 'picture.png') + ', "rb"),');
  const extra = Object.entries(body).filter(([k]) => !openai.includes(k))
    .map(([k, v]) => JSON.stringify(k) + ': ' + pyValue(v));
  if (extra.length) args.push('    extra_body={' + extra.join(', ') + '},');
  $('snippet-sdk').textContent = (state.key ? 'import os\n' : '') +
    'from openai import OpenAI\n\nclient = OpenAI(base_url="' +
    location.origin + '/v1", api_key=' + (state.key ? 'os.environ["SLUICE_API_KEY"]' : '"none"') +
    ')\n' + (video ? 'video = client.videos.create(\n'
      : picture ? 'image = client.images.edit(\n' : 'image = client.images.generate(\n') +
    args.join('\n') + '\n)\n';
}

$('play-form').addEventListener('input', renderSnippets);

$('play-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  $('play-error').textContent = '';
  const { video, body, picture } = playBody();
  if (!video) body.async = true;  // 202 at once; the job view follows it.
  const { path, field } = playTarget(video, picture);
  try {
    const r = await api(path, picture
      ? { method: 'POST', body: playForm(body, picture, field) }  // The browser sets the boundary.
      : { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
    const job = await r.json();
    show('jobs');
    openJob(job.id);
  } catch (e) {
    $('play-error').textContent = e instanceof Unauthorized ? 'An API key is needed.' : e.message;
  }
});

async function loadModels() {
  for (;;) {
    try {
      const list = await (await api('/v1/models')).json();
      state.models = list.data;
      $('play-model').replaceChildren(...list.data.map((m) =>
        el('option', m.default ? { value: m.id, selected: '' } : { value: m.id }, m.id)));
      // The LoRA adapters requests may name (none: the field offers none).
      const adapters = (await (await api('/v1/adapters')).json()).data;
      $('play-lora').replaceChildren(el('option', { value: '' }, 'none'),
        ...adapters.map((a) => el('option', { value: a.id }, a.id + ' (rank ' + a.rank + ')')));
      renderSnippets();
      return;
    } catch (e) {
      if (e instanceof Unauthorized) await keyGiven();
      else return;
    }
  }
}

followCluster();
loadModels();
renderSnippets();
