// The dashboard page: reads api/snapshot (Wire JSON) and api/history, follows
// api/events, and draws every GPU on one canvas (no element per GPU, so 5000
// nodes of 8 GPUs stay responsive). Query parameters: live=0 reads once and
// does not follow events; explain=NS/NAME opens that pod's explanation;
// bench=1 loads the snapshot, then again as an
// update, and times both, with synchronous requests so that both are done
// before the page's load event (when headless Chromium's --dump-dom reads the
// DOM, on the real clock). Timings land in data attributes of <body>:
// data-first-render-ms (navigation start to first map drawn), data-first-fetch-ms
// and data-first-draw-ms (its fetch+decode and drawing parts), and
// data-update-ms / data-update-draw-ms for the latest update.
(() => {
  'use strict';
  const $ = (id) => document.getElementById(id);
  const params = new URLSearchParams(location.search);
  const live = params.get('live') !== '0';
  const bench = params.get('bench') === '1';
  const body = document.body;
  // A script error is kept on <body> (data-error), where tests look for it.
  window.addEventListener('error', (e) => { body.dataset.error = String(e.message); });
  window.addEventListener('unhandledrejection', (e) => { body.dataset.error = String(e.reason); });
  const MAX_ROWS = 200;   // pending pods listed; the count covers all
  // The free part of a node's GPUs is hatched when a tenth or more of the node's
  // free milli-GPU is fragmented; the more, the denser (one pixel in step).
  const hatchStep = (ratio) => ratio >= 0.75 ? 3 : ratio >= 0.5 ? 4 : ratio >= 0.25 ? 6 : ratio >= 0.1 ? 9 : 0;

  const css = getComputedStyle(document.documentElement);
  const color = (name) => css.getPropertyValue(name).trim();
  const C = { free: color('--free'), frag: color('--frag'), sick: color('--sick'), text: '#374151', muted: '#9ca3af', full: color('--full') };
  // Allocated milli-GPU, in steps of 50, from a light to a deep blue.
  const allocColors = Array.from({ length: 21 }, (_, i) => `hsl(217, 78%, ${80 - i * 2.1}%)`);
  // The same colours as pixels of an ImageData (RGBA bytes, little-endian words).
  const probe = document.createElement('canvas').getContext('2d', { willReadFrequently: true });
  const pixel = (css) => {
    probe.fillStyle = css; probe.fillRect(0, 0, 1, 1);
    return new Uint32Array(probe.getImageData(0, 0, 1, 1).data.buffer)[0];
  };
  const P = { free: pixel(C.free), frag: pixel(C.frag), sick: pixel(C.sick), muted: pixel(C.muted), alloc: allocColors.map(pixel) };

  let snap = null; // the current Wire snapshot
  let phase = () => {}; // marks the end of a step of apply, timed into data-phases-ms
  let history = []; // Samples, oldest first
  let layout = null; // how the map was drawn, for hit testing
  let mapWidth = 0; // the map's width in pixels; 0: measure it
  let image = null; // the map's pixels, kept between draws of the same size
  let selected = ''; // the node whose details are shown
  let fetching = false;
  let wanted = 0; // the newest version the server announced

  const map = $('gpu-map');
  const ctx = map.getContext('2d');

  function banner(msg) {
    const b = $('banner');
    b.textContent = msg;
    b.hidden = !msg;
  }

  // load fetches the snapshot and draws it; kind is "first" or "update".
  async function load(kind) {
    if (fetching) return;
    fetching = true;
    try {
      const t0 = performance.now();
      const r = await fetch('api/snapshot', { cache: 'no-store' });
      const s = await r.json();
      if (!r.ok) throw new Error(s.error || r.statusText);
      const t1 = performance.now();
      apply(s);
      timed(kind, t0, t1, performance.now());
      if (!bannerFromServer) banner('');
    } catch (e) {
      banner('Cannot read the GPU snapshot: ' + e.message);
    } finally {
      fetching = false;
    }
    if (snap && wanted > snap.version) load('update');
  }

  // timed records a load's timings: t0 request, t1 decoded, t2 drawn.
  function timed(kind, t0, t1, t2) {
    if (kind === 'first') {
      body.dataset.firstRenderMs = t2.toFixed(1);
      body.dataset.firstFetchMs = (t1 - t0).toFixed(1);
      body.dataset.firstDrawMs = (t2 - t1).toFixed(1);
    } else {
      body.dataset.updateMs = (t2 - t0).toFixed(1);
      body.dataset.updateDrawMs = (t2 - t1).toFixed(1);
      body.dataset.updates = String(Number(body.dataset.updates || 0) + 1);
    }
  }

  // benchmark loads and draws the snapshot twice, synchronously (bench=1).
  function benchmark() {
    for (const kind of ['first', 'update']) {
      const t0 = performance.now();
      const x = new XMLHttpRequest();
      x.open('GET', 'api/snapshot', false);
      x.send();
      if (x.status !== 200) { banner('Cannot read the GPU snapshot: HTTP ' + x.status); return; }
      const s = JSON.parse(x.responseText);
      const t1 = performance.now();
      apply(s);
      timed(kind, t0, t1, performance.now());
    }
  }

  function apply(s) {
    snap = s;
    const phases = [];
    let t = performance.now();
    phase = (name) => { const now = performance.now(); phases.push(`${name}:${(now - t).toFixed(1)}`); t = now; };
    fillSelect($('filter-model'), s.models, s.nodes, (n) => n.gm ? n.gm : [n.m]);
    fillSelect($('filter-pool'), s.pools, s.nodes, (n) => [n.p]);
    summary();
    phase('filters');
    drawMap();
    phase('put');
    pending();
    problems();
    phase('lists');
    body.dataset.phasesMs = phases.join(' ');
    if (selected) details(selected);
    body.dataset.version = String(s.version);
    body.dataset.state = 'ready';
  }

  // The filters' first values come from the URL (?model=...&pool=...), so a
  // filtered view can be linked to; choosing one puts it in the URL.
  const initial = { 'filter-model': params.get('model') || '', 'filter-pool': params.get('pool') || '' };
  function filtersToURL() {
    const u = new URL(location.href);
    for (const [id, key] of [['filter-model', 'model'], ['filter-pool', 'pool']]) {
      if ($(id).value) u.searchParams.set(key, $(id).value); else u.searchParams.delete(key);
    }
    history.replaceState(null, '', u);
  }

  // fillSelect lists names (with their node counts) as options, keeping the choice.
  function fillSelect(sel, names, nodes, of) {
    const counts = new Array(names.length).fill(0);
    for (const n of nodes) {
      const idx = of(n);
      for (let k = 0; k < idx.length; k++) if (idx.indexOf(idx[k]) === k) counts[idx[k]]++;
    }
    const keep = initial[sel.id] ?? sel.value;
    delete initial[sel.id];
    const opts = [new Option('all', '')];
    names.forEach((name, i) => { if (counts[i]) opts.push(new Option(`${name || '(none)'} (${counts[i]})`, name)); });
    sel.replaceChildren(...opts);
    sel.value = names.includes(keep) ? keep : '';
  }

  function summary() {
    const c = snap.cluster;
    const set = (id, text, attr, value) => { const e = $(id); e.textContent = text; e.dataset[attr] = String(value); };
    set('node-count', String(c.nodes), 'nodes', c.nodes);
    set('gpu-count', String(c.gpus), 'gpus', c.gpus);
    set('alloc-pct', c.allocatedPct.toFixed(1) + '%', 'pct', c.allocatedPct);
    set('frag-pct', c.fragmentedPct.toFixed(1) + '%', 'pct', c.fragmentedPct);
    set('pending-total', String(snap.pendingTotal), 'pending', snap.pendingTotal);
    status();
  }

  function status() {
    if (!snap) return;
    const st = $('status');
    st.dataset.live = String(live && connected);
    st.textContent = `${live ? (connected ? 'live' : 'reconnecting…') : 'not following changes'} · snapshot ${snap.version} of ${new Date(snap.built).toLocaleTimeString()}`;
  }

  // drawMap draws the nodes that pass the filters, each a block of GPU cells.
  function drawMap() {
    const model = $('filter-model').value, pool = $('filter-pool').value;
    const mi = snap.models.indexOf(model), pi = snap.pools.indexOf(pool);
    const nodes = snap.nodes.filter((n) => (pool === '' || n.p === pi) &&
      (model === '' || n.m === mi || (n.gm && n.gm.includes(mi))));
    let maxGPUs = 1;
    for (const n of nodes) maxGPUs = Math.max(maxGPUs, n.a.length);
    const cells = nodes.length * maxGPUs;
    const cell = cells <= 600 ? 18 : cells <= 8000 ? 10 : 6;
    const gap = cell >= 10 ? 2 : 1;
    const labels = cell >= 18;
    const perRow = Math.min(8, maxGPUs), gpuRows = Math.ceil(maxGPUs / perRow);
    const labelH = labels ? 13 : 0;
    const bw = perRow * (cell + gap) + (labels ? 14 : 5);
    const bh = gpuRows * (cell + gap) + labelH + (labels ? 8 : 4);
    if (!mapWidth) mapWidth = $('map-scroll').clientWidth || 800; // measured once, and again on resize
    const width = Math.max(bw, mapWidth);
    const cols = Math.max(1, Math.floor(width / bw));
    const height = Math.max(bh, Math.ceil(nodes.length / cols) * bh);
    if (map.width !== width || map.height !== height) { // a new size reallocates the canvas: only when it changes
      map.width = width; map.height = height;
      map.style.width = width + 'px'; map.style.height = height + 'px';
    }
    // The cells are written as pixels into one image, put on the canvas at
    // once: a canvas call per cell costs far more at 40000 GPUs.
    phase('layout');
    if (!image || image.width !== width || image.height !== height) image = ctx.createImageData(width, height);
    const img = image;
    const px = new Uint32Array(img.data.buffer);
    px.fill(0);
    const rect = (x, y, w, h, c) => { for (let r = y; r < y + h; r++) px.fill(c, r * width + x, r * width + x + w); };
    const hatched = (x, y, w, h, step) => {
      for (let r = y; r < y + h; r++) for (let q = x; q < x + w; q++) px[r * width + q] = (q + r) % step === 0 ? P.frag : P.free;
    };
    const inner = perRow * (cell + gap) - gap, innerH = gpuRows * (cell + gap) - gap;
    for (let i = 0; i < nodes.length; i++) {
      const n = nodes[i];
      const x0 = (i % cols) * bw, gy = Math.floor(i / cols) * bh + labelH;
      if (n.e) { // unreadable inventory: an outlined block
        rect(x0, gy, inner, 1, P.sick); rect(x0, gy + innerH - 1, inner, 1, P.sick);
        rect(x0, gy, 1, innerH, P.sick); rect(x0 + inner - 1, gy, 1, innerH, P.sick);
        rect(x0 + 2, gy + 2, Math.max(2, cell >> 1), Math.max(2, cell >> 1), P.sick);
        continue;
      }
      const step = hatchStep(n.fr > 0 ? n.f / n.fr : 0);
      for (let j = 0; j < n.a.length; j++) {
        const x = x0 + (j % perRow) * (cell + gap), y = gy + Math.floor(j / perRow) * (cell + gap);
        if (n.x && n.x[j] !== undefined) { rect(x, y, cell, cell, P.sick); continue; }
        const a = Math.min(1000, n.a[j]);
        const h = a > 0 ? Math.max(1, Math.round(cell * a / 1000)) : 0;
        if (h < cell) { if (step) hatched(x, y, cell, cell - h, step); else rect(x, y, cell, cell - h, P.free); }
        if (h > 0) rect(x, y + cell - h, cell, h, P.alloc[Math.min(20, Math.max(1, Math.round(a / 50)))]);
      }
      if (n.c) rect(x0, gy + innerH + 1, inner, 1, P.muted);
    }
    phase('pixels');
    ctx.putImageData(img, 0, 0);
    if (labels) {
      ctx.font = '10px system-ui, sans-serif';
      ctx.textBaseline = 'top';
      nodes.forEach((n, i) => {
        ctx.fillStyle = n.e ? C.sick : n.c ? C.muted : C.text;
        ctx.fillText(n.n.length > 28 ? n.n.slice(0, 27) + '…' : n.n, (i % cols) * bw, Math.floor(i / cols) * bh, bw - 4);
      });
    }
    layout = { nodes, cell, gap, perRow, bw, bh, cols, labelH };
    map.dataset.drawnNodes = String(nodes.length);
    $('shown-count').textContent = nodes.length === snap.nodes.length ? '' : `${nodes.length} of ${snap.nodes.length} nodes shown`;
  }

  // hit finds the node and GPU (position, or -1) under a mouse event.
  function hit(ev) {
    if (!layout) return null;
    const r = map.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const L = layout, col = Math.floor(x / L.bw), row = Math.floor(y / L.bh);
    const i = row * L.cols + col;
    if (col < 0 || col >= L.cols || i < 0 || i >= L.nodes.length) return null;
    const n = L.nodes[i];
    const lx = x - col * L.bw, ly = y - row * L.bh - L.labelH;
    let g = -1;
    if (lx >= 0 && ly >= 0) {
      const gc = Math.floor(lx / (L.cell + L.gap)), gr = Math.floor(ly / (L.cell + L.gap));
      if (gc < L.perRow && gr * L.perRow + gc < n.a.length) g = gr * L.perRow + gc;
    }
    return { n, g };
  }

  function tipText(n, g) {
    const lines = [`${n.n}${n.c ? ' (cordoned)' : ''}`, `pool ${snap.pools[n.p] || '-'} · ${snap.models[n.m] || 'no model'}`];
    if (n.e) return lines.concat('GPUs unreadable: ' + n.e).join('\n');
    lines.push(`free ${n.fr}m · fragmented ${n.f}m`);
    if (g >= 0) {
      const model = n.gm ? snap.models[n.gm[g]] : snap.models[n.m];
      lines.push(`GPU ${g} (${model}): ${n.a[g]}m allocated, memory ${n.ma[g]}/${n.mc[g]} MiB`);
      if (n.x && n.x[g] !== undefined) lines.push('unhealthy: ' + n.x[g]);
    }
    lines.push('click for holders');
    return lines.join('\n');
  }

  map.addEventListener('mousemove', (ev) => {
    const h = hit(ev), tip = $('tip');
    if (!h) { tip.hidden = true; return; }
    tip.textContent = tipText(h.n, h.g);
    const panel = $('map-panel').getBoundingClientRect();
    tip.style.left = (ev.clientX - panel.left + 14) + 'px';
    tip.style.top = (ev.clientY - panel.top + 14) + 'px';
    tip.hidden = false;
  });
  map.addEventListener('mouseleave', () => { $('tip').hidden = true; });
  map.addEventListener('click', (ev) => { const h = hit(ev); if (h) details(h.n.n); });
  $('details-close').addEventListener('click', () => { selected = ''; $('details').hidden = true; });
  for (const id of ['filter-model', 'filter-pool']) $(id).addEventListener('change', () => { filtersToURL(); drawMap(); });
  let resizeTimer = 0;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { mapWidth = 0; if (snap) drawMap(); }, 150);
  });

  // details shows a node's GPUs and the pods holding them.
  async function details(name) {
    selected = name;
    $('details-kind').textContent = 'Node';
    $('details-name').textContent = name;
    $('details').hidden = false;
    const out = $('details-body');
    try {
      const r = await fetch('api/node?name=' + encodeURIComponent(name), { cache: 'no-store' });
      const n = await r.json();
      if (!r.ok) throw new Error(n.error || r.statusText);
      if (selected !== name) return;
      if (n.inventoryError) { out.replaceChildren(el('p', 'err', 'GPUs unreadable: ' + n.inventoryError)); return; }
      const t = el('table');
      t.append(row('th', ['GPU', 'model', 'allocated', 'memory MiB', 'held by']));
      for (const g of n.gpus) {
        const holders = (g.holders || []).map((h) => `${h.namespace}/${h.name} (${h.milli}m, prio ${h.priority})`)
          .concat((g.reserved || []).map((r) => `reserved ${r.milli}m for ${r.for} (${r.id})`)).join('\n');
        t.append(row('td', [String(g.index), g.model + (g.unhealthy ? ' — unhealthy: ' + g.unhealthy : ''),
          g.allocatedMilli + 'm', `${g.allocatedMemoryMiB}/${g.memoryMiB}`, holders || '-']));
      }
      out.replaceChildren(el('p', '', `${n.pool ? 'pool ' + n.pool + ' · ' : ''}free ${n.capacityMilli - n.allocatedMilli}m · fragmented ${n.fragmentedMilli.toFixed(1)}m · CPU free ${n.freeMilliCPU}m of ${n.allocatableMilliCPU}m`), t);
    } catch (e) {
      out.replaceChildren(el('p', 'err', 'Cannot read the node: ' + e.message));
    }
  }

  // explain shows why a pending pod waits and the nearest ways it would
  // run, as kubectl gpusched explain answers.
  async function explain(key) {
    selected = '';
    $('details-kind').textContent = 'Pod';
    $('details-name').textContent = key;
    $('details').hidden = false;
    const out = $('details-body');
    try {
      const r = await fetch('api/explain?pod=' + encodeURIComponent(key), { cache: 'no-store' });
      const e = await r.json();
      if (!r.ok) throw new Error(e.error || r.statusText);
      const verdict = el('p', 'verdict', e.verdict);
      verdict.dataset.verdict = e.verdict;
      const parts = [verdict];
      if (e.queuePosition) parts.push(el('p', '', `queue: ${e.queuePosition} of ${e.queueLength} pending GPU pods`));
      if (e.fixes && e.fixes.length) {
        const ol = el('ol', 'fixes');
        for (const f of e.fixes) ol.append(el('li', '', f.text));
        parts.push(el('p', '', 'Nearest ways it would run:'), ol);
      }
      if (e.gang) {
        parts.push(el('p', '', `gang ${e.gang.name} (minMember ${e.gang.minMember}): ${e.gang.bound} bound, ${e.gang.pending} pending, ${e.gang.fitNow} fit now together`));
        if (e.gang.clique) parts.push(el('p', '', e.gang.clique));
      }
      if (e.schedulerSays) parts.push(el('p', 'reason', "scheduler's last attempt: " + e.schedulerSays));
      out.replaceChildren(...parts);
    } catch (err) {
      out.replaceChildren(el('p', 'err', 'Cannot explain the pod: ' + err.message));
    }
  }
  $('pending').tBodies[0].addEventListener('click', (ev) => {
    const tr = ev.target.closest('tr[data-pod]');
    if (tr) explain(tr.dataset.pod);
  });

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function row(cell, texts) {
    const tr = el('tr');
    for (const t of texts) { const c = el(cell, '', t); c.style.whiteSpace = 'pre-line'; tr.append(c); }
    return tr;
  }

  // pending lists the first MAX_ROWS pending pods, in queue order, with why they wait.
  function pending() {
    $('pending-count').textContent = String(snap.pendingTotal);
    $('pending-count').dataset.pending = String(snap.pendingTotal);
    const classes = Object.entries(snap.pendingByReason).sort((a, b) => b[1] - a[1]);
    $('pending-reasons').replaceChildren(...classes.map(([c, k]) => el('span', 'class ' + c, `${c} ${k}`)));
    const rows = [];
    for (const p of snap.pending.slice(0, MAX_ROWS)) {
      const tr = el('tr');
      tr.dataset.pod = `${p.ns}/${p.name}`;
      tr.dataset.class = p.class;
      const pod = el('td', 'pod', p.name);
      pod.append(el('small', '', p.ns + (p.gang ? ' · gang ' + p.gang : '') + (p.prio ? ' · prio ' + p.prio : '')));
      const asks = p.error ? el('td', 'err', 'invalid request') : el('td', '', p.demand || '');
      const why = el('td', 'why');
      why.append(el('span', 'class ' + p.class, p.class));
      if (p.error) why.append(el('small', 'err', p.error));
      why.append(el('small', 'reason', p.reason || 'not yet tried by the scheduler'));
      tr.append(el('td', 'pos', String(p.pos)), pod, asks, why);
      rows.push(tr);
    }
    $('pending').tBodies[0].replaceChildren(...rows);
    const more = snap.pendingTotal - rows.length;
    $('pending-more').textContent = more > 0 ? `and ${more} more pending GPU pods not listed` : '';
  }

  // problems lists the nodes whose GPU inventory is malformed.
  function problems() {
    const bad = snap.nodes.filter((n) => n.e);
    $('problems').hidden = bad.length === 0;
    const items = bad.slice(0, 50).map((n) => { const li = el('li', '', `${n.n}: ${n.e}`); li.dataset.node = n.n; return li; });
    if (bad.length > 50) items.push(el('li', '', `and ${bad.length - 50} more`));
    $('problem-list').replaceChildren(...items);
  }

  // drawHistory draws allocated % and fragmented % over the samples.
  function drawHistory() {
    const cv = $('history'), g = cv.getContext('2d');
    const w = cv.width = cv.clientWidth || 420, h = cv.height = 140;
    const pad = { l: 30, r: 6, t: 6, b: 16 };
    g.clearRect(0, 0, w, h);
    g.font = '10px system-ui, sans-serif'; g.fillStyle = C.muted; g.strokeStyle = '#eef0f3'; g.textBaseline = 'middle';
    for (const v of [0, 50, 100]) {
      const y = pad.t + (h - pad.t - pad.b) * (1 - v / 100);
      g.beginPath(); g.moveTo(pad.l, y); g.lineTo(w - pad.r, y); g.stroke();
      g.fillText(v + '%', 2, y);
    }
    cv.dataset.samples = String(history.length);
    if (!history.length) return;
    const t0 = Date.parse(history[0].time), t1 = Date.parse(history[history.length - 1].time);
    const span = Math.max(1, t1 - t0);
    const xOf = (s) => history.length === 1 ? w - pad.r : pad.l + (w - pad.l - pad.r) * (Date.parse(s.time) - t0) / span;
    const yOf = (v) => pad.t + (h - pad.t - pad.b) * (1 - Math.min(100, v) / 100);
    for (const [key, col] of [['allocatedPct', C.full], ['fragmentedPct', C.frag]]) {
      g.strokeStyle = col; g.lineWidth = 2; g.beginPath();
      history.forEach((s, i) => { const x = xOf(s), y = yOf(s[key]); i ? g.lineTo(x, y) : g.moveTo(x, y); });
      if (history.length === 1) g.lineTo(pad.l, yOf(history[0][key]));
      g.stroke();
    }
    g.fillStyle = C.muted;
    g.fillText(`last ${span < 120000 ? Math.round(span / 1000) + ' s' : Math.round(span / 60000) + ' min'}`, w - 60, h - 7);
  }

  async function loadHistory() {
    try {
      const r = await fetch('api/history', { cache: 'no-store' });
      if (r.ok) { history = await r.json(); drawHistory(); }
    } catch (e) { /* the chart stays empty; the map says more */ }
  }

  let connected = false, bannerFromServer = false;
  function follow() {
    const es = new EventSource('api/events');
    es.onopen = () => { connected = true; status(); };
    es.onerror = () => { connected = false; status(); };
    es.addEventListener('snapshot', (e) => {
      wanted = Math.max(wanted, JSON.parse(e.data).version);
      if (!snap || wanted > snap.version) load(snap ? 'update' : 'first');
    });
    es.addEventListener('sample', (e) => {
      const s = JSON.parse(e.data);
      if (history.length && s.seq <= history[history.length - 1].seq) return;
      history.push(s);
      if (history.length > 1000) history.shift();
      drawHistory();
    });
    es.addEventListener('rebuild', (e) => {
      const err = JSON.parse(e.data).error;
      bannerFromServer = !!err;
      banner(err ? 'The snapshot is out of date: ' + err : '');
    });
  }

  if (bench) {
    benchmark();
  } else {
    loadHistory();
    load('first');
    if (params.get('explain')) explain(params.get('explain'));
    if (live && window.EventSource) follow();
  }
})();
