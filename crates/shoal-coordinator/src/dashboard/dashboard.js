// Shoal's dashboard: polls /api/cluster and /api/history once a second and
// draws what they say. No dependencies; charts are drawn on canvas here.
// Every text from the cluster (table names, reasons) goes in as text, never
// as HTML.
'use strict';

const POLL_MS = 1000;
const COLORS = ['#2f6fde', '#d64545', '#1f9d55', '#d99a00', '#8a5cd6', '#0f9bb0', '#c2417f', '#6b7d2a',
  '#e0702b', '#4b5563'];
const history = new Map(); // server id -> points, oldest first
let lastT = 0;
let windowMs = 5 * 60 * 1000;

function color(id) { return COLORS[(Number(id) - 1) % COLORS.length]; }

/** An element with attributes (data-* included) and children (strings become text). */
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k === 'class') e.className = v; else e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function swatch(id) { const s = el('span', { class: 'swatch' }); s.style.background = color(id); return s; }

function bytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n : n.toFixed(1)) + ' ' + units[i];
}
function ms(n) {
  if (n === null || n === undefined) return 'unknown';
  return n < 10000 ? n + ' ms' : (n / 1000).toFixed(1) + ' s';
}
function pct(f) { return f === null || f === undefined ? '–' : (100 * f).toFixed(1) + '%'; }
function num(n, digits) { return n === null || n === undefined ? '–' : Number(n).toFixed(digits || 0); }
function time(unixMs) { return new Date(unixMs).toLocaleTimeString(); }

function bar(fraction, label, cls) {
  const b = el('div', { class: 'bar ' + (cls || '') }, el('span'), el('em', {}, label));
  b.firstChild.style.width = Math.max(0, Math.min(1, fraction || 0)) * 100 + '%';
  return b;
}

async function fetchJson(url) {
  const r = await fetch(url, { cache: 'no-store' });
  if (!r.ok) throw new Error(url + ': HTTP ' + r.status);
  return r.json();
}

function mergeHistory(h) {
  windowMs = h.window_ms || windowMs;
  const seen = new Set();
  for (const s of h.servers) {
    seen.add(s.id);
    const pts = history.get(s.id) || [];
    const last = pts.length ? pts[pts.length - 1].t : 0;
    for (const p of s.points) if (p.t > last) pts.push(p);
    history.set(s.id, pts);
    if (pts.length) lastT = Math.max(lastT, pts[pts.length - 1].t);
  }
  for (const id of [...history.keys()]) if (!seen.has(id)) history.delete(id);
  for (const pts of history.values()) {
    while (pts.length && pts[0].t < lastT - windowMs) pts.shift();
  }
}

function renderSummary(c) {
  const co = c.coordinator;
  const up = c.servers.filter(s => s.state === 'up').length;
  document.getElementById('summary').textContent =
    `coordinator ${co.control} · map version ${co.map_version} · R = ${co.replicas} · ` +
    `${up} of ${c.servers.length} servers up · ${c.tables.length} tables · up ${co.uptime_secs} s`;
}

function renderServers(c) {
  const body = document.querySelector('#servers tbody');
  body.replaceChildren(...c.servers.map(s => {
    const st = s.stats;
    const tables = s.tables.map(t => `${t.name === null ? '#' + t.table : t.name}: ${t.tablets}`).join(', ');
    const memory = st ? bar(s.memory_used, `${pct(s.memory_used)} of ${bytes(st.memory_bytes)} · live ${bytes(st.live_bytes)}`) : '–';
    const logUtil = st ? bar(st.log_utilisation, pct(st.log_utilisation)) : '–';
    let note = s.stats_error || '';
    if (s.pieces_recovering) note = `replaying ${s.pieces_recovering} tablet piece(s) of a dead server` + (note ? '; ' + note : '');
    if (s.state === 'down') note = 'declared dead (no longer polled)';
    return el('tr', { 'data-server': s.id, 'data-state': s.state },
      el('td', {}, swatch(s.id), 'server ' + s.id),
      el('td', {}, el('span', { class: 'badge ' + s.state }, s.state)),
      el('td', {}, s.native),
      el('td', { title: tables }, String(s.tablets), tables ? el('div', { class: 'hint' }, tables) : null),
      el('td', {}, memory),
      el('td', {}, logUtil),
      el('td', { class: 'num' }, s.state === 'down' ? '–' : num(s.ops_per_sec, 0)),
      el('td', { class: 'num' }, s.state === 'down' || s.ping_us === null ? '–' : num(s.ping_us / 1000, 2)),
      el('td', { class: 'num' }, st ? String(st.closed_segments_below_r) : '–'),
      el('td', { class: 'hint' }, note));
  }));
}

function renderTables(c) {
  const box = document.getElementById('tables');
  if (!c.tables.length) { box.replaceChildren(el('p', { class: 'empty' }, 'No tables.')); return; }
  const NS = 'http://www.w3.org/2000/svg';
  box.replaceChildren(...c.tables.map(t => {
    const svg = document.createElementNS(NS, 'svg');
    svg.setAttribute('viewBox', '0 0 1000 18');
    svg.setAttribute('preserveAspectRatio', 'none');
    for (const x of t.tablets) {
      const r = document.createElementNS(NS, 'rect');
      r.setAttribute('x', x.start * 1000);
      r.setAttribute('width', Math.max(0.5, (x.end - x.start) * 1000));
      r.setAttribute('y', 0); r.setAttribute('height', 18);
      r.setAttribute('fill', color(x.master));
      r.setAttribute('stroke', '#fff'); r.setAttribute('stroke-width', '0.5');
      const title = document.createElementNS(NS, 'title');
      title.textContent = `hashes ${x.start_hash}–${x.end_hash}: server ${x.master}`;
      r.append(title);
      svg.append(r);
    }
    return el('div', { class: 'tablemap', 'data-table': t.id },
      el('span', { class: 'name', title: t.name }, t.name), svg, el('span', { class: 'hint' }, t.tablets.length + ' tablets'));
  }));
}

function renderReplication(c) {
  const r = c.replication;
  const rows = [
    ['Replicas per segment (R)', String(r.replicas)],
    ['Closed segments below R', `${r.segments_below_r} (as ${r.servers_reporting} of ${r.live_servers} live servers report)`, r.segments_below_r > 0],
    ['Bytes written, not yet durable', bytes(r.durable_lag_bytes)],
    ['Fenced logs awaiting recovery', String(r.fenced_logs), r.fenced_logs > 0],
    ['Replica floors', String(r.replica_floors)],
  ];
  document.getElementById('replication').replaceChildren(...rows.flatMap(([k, v, bad]) =>
    [el('dt', {}, k), el('dd', { class: bad ? 'bad' : null }, v)]));
}

function phases(list) {
  return el('ol', { class: 'phases' }, list.map(([name, state]) => el('li', { class: state }, name)));
}

function renderRecoveries(c) {
  document.getElementById('suspects').replaceChildren(...c.suspects.map(s =>
    el('div', { class: 'suspect', 'data-server': s.server, 'data-phase': s.phase },
      el('h4', {}, el('span', { class: 'badge suspect' }, 'suspected'), ` server ${s.server}`),
      phases([['reported unreachable' + (s.reporter !== null ? ' by server ' + s.reporter : ''), 'done'],
        ['coordinator pings it', s.phase === 'pinging' ? 'active' : 'done'],
        ['waiting for its lease to end' + (s.lease_left_ms !== null ? ` (${ms(s.lease_left_ms)} left)` : ''),
          s.phase === 'pinging' ? '' : 'active'],
        ['declared dead', '']]),
      el('div', { class: 'hint' }, `first suspected ${ms(s.suspected_ms)} ago` + (s.why ? `; last ping: ${s.why}` : '')))));

  const box = document.getElementById('recoveries');
  if (!c.recoveries.length) box.replaceChildren(el('p', { class: 'empty' }, 'No recovery in progress.'));
  else box.replaceChildren(...c.recoveries.map(r => {
    const assigned = r.partitions.length > 0;
    const detection = r.detection_ms === null ? 'detection' :
      `detection ${ms(r.detection_ms)}` + (r.lease_wait_ms !== null ? ` (lease wait ${ms(r.lease_wait_ms)})` : '');
    return el('div', { class: 'recovery', 'data-dead': r.dead, 'data-recovery': r.id, 'data-status': 'running' },
      el('h4', {}, el('span', { class: 'badge running' }, 'in progress'),
        ` recovery ${r.id} of server ${r.dead} · logs ${r.logs.join(', ')} · ${ms(r.elapsed_ms)} since declared dead`),
      phases([[detection, 'done'], ['declared dead', 'done'],
        [assigned ? `partitions assigned${r.assigned_ms !== null ? ' after ' + ms(r.assigned_ms) : ''}` : 'waiting for a recovery master',
          assigned ? 'done' : 'active'],
        [`replay: ${r.partitions_done} of ${r.partitions.length} partitions done`, assigned ? 'active' : ''],
        ['done', '']]),
      bar(r.progress, `${r.partitions_done} / ${r.partitions.length} partitions`, 'progress'),
      partitionTable(r));
  }));

  const fin = document.getElementById('finished');
  if (!c.finished_recoveries.length) fin.replaceChildren(el('p', { class: 'empty' }, 'None.'));
  else fin.replaceChildren(...c.finished_recoveries.map(f =>
    el('div', { class: 'recovery', 'data-dead': f.dead, 'data-recovery': f.id, 'data-status': 'finished' },
      el('h4', {}, el('span', { class: 'badge finished' }, 'finished'),
        ` recovery ${f.id} of server ${f.dead} · finished ${time(f.finished_unix_ms)}`),
      phases([[`detection ${ms(f.detection_ms)}` + (f.lease_wait_ms !== null ? ` (lease wait ${ms(f.lease_wait_ms)})` : ''), 'done'],
        [`partitions assigned after ${ms(f.assigned_ms)}`, 'done'],
        [`replay ${ms(f.replay_ms)} (slowest partition)`, 'done'],
        [`total ${ms(f.total_ms)} from declaration`, 'done']]),
      bar(1, `${f.partitions} / ${f.partitions} partitions · ${num(f.objects)} objects · ${bytes(f.bytes)}`, 'progress'))));
}

function partitionTable(r) {
  if (!r.partitions.length) return null;
  return el('table', {},
    el('thead', {}, el('tr', {}, ['Partition', 'Recovery master', 'Tablet pieces', 'State', 'Replayed (its STATS)'].map(h => el('th', {}, h)))),
    el('tbody', {}, r.partitions.map(p => el('tr', { 'data-partition': p.index, 'data-done': p.done },
      el('td', {}, String(p.index)),
      el('td', {}, swatch(p.master), 'server ' + p.master),
      el('td', {}, String(p.tablets)),
      el('td', {}, p.done ? `done after ${ms(p.done_after_ms)}` : 'replaying'),
      el('td', {}, p.replayed ? `${p.replayed.segments} segments · ${bytes(p.replayed.bytes)} · ${p.replayed.objects} objects` : '–')))));
}

function renderFailures(c) {
  const body = document.querySelector('#failures tbody');
  if (!c.failures.length) { body.replaceChildren(el('tr', {}, el('td', { colspan: 5, class: 'empty' }, 'None.'))); return; }
  body.replaceChildren(...c.failures.map(f => el('tr', { 'data-server': f.server },
    el('td', {}, time(f.unix_ms)),
    el('td', {}, swatch(f.server), 'server ' + f.server),
    el('td', {}, f.native),
    el('td', { class: 'reason' }, f.reason),
    el('td', {}, f.recovery === null ? 'none (no tablets)' : 'recovery ' + f.recovery))));
}

function drawChart(canvas, now) {
  const key = canvas.dataset.chart;
  const percent = canvas.dataset.percent === '1';
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 560, h = canvas.clientHeight || 200;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext('2d');
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const pad = { l: 48, r: 8, t: 8, b: 20 };
  const series = [];
  let max = 0, drawn = 0;
  for (const [id, pts] of history) {
    const vals = pts.map(p => [p.t, p[key] === null || p[key] === undefined ? null : p[key] * (percent ? 100 : 1)]);
    for (const [, v] of vals) if (v !== null) max = Math.max(max, v);
    series.push([id, vals]);
  }
  if (percent) max = 100;
  else max = niceMax(max);
  const x = t => pad.l + (w - pad.l - pad.r) * (1 - (now - t) / windowMs);
  const y = v => h - pad.b - (h - pad.t - pad.b) * (v / max);
  g.strokeStyle = '#e3e6ec'; g.fillStyle = '#6b7280'; g.font = '11px system-ui, sans-serif'; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4, yy = y(v);
    g.beginPath(); g.moveTo(pad.l, yy); g.lineTo(w - pad.r, yy); g.stroke();
    g.fillText(fmtAxis(v), 4, yy + 4);
  }
  for (let m = 0; m <= windowMs / 60000; m++) {
    const xx = x(now - m * 60000);
    g.fillText(m === 0 ? 'now' : `-${m} min`, Math.min(xx - 10, w - 30), h - 5);
  }
  for (const [id, vals] of series) {
    g.strokeStyle = color(id); g.lineWidth = 1.5; g.beginPath();
    let pen = false;
    for (const [t, v] of vals) {
      if (v === null || t < now - windowMs) { pen = false; continue; }
      if (pen) g.lineTo(x(t), y(v)); else g.moveTo(x(t), y(v));
      pen = true; drawn++;
    }
    g.stroke();
  }
  if (!drawn) { g.fillStyle = '#9aa1ad'; g.fillText('no samples yet', w / 2 - 35, h / 2); }
  canvas.dataset.points = drawn;
}

function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
function fmtAxis(v) { return v >= 10000 ? (v / 1000).toFixed(0) + 'k' : (v >= 10 ? v.toFixed(0) : v.toFixed(v ? 2 : 0)); }

function renderCharts(c) {
  for (const canvas of document.querySelectorAll('canvas[data-chart]')) drawChart(canvas, c.now_unix_ms);
  document.getElementById('legend').replaceChildren(...[...history.keys()].map(id =>
    el('span', {}, swatch(id), 'server ' + id)));
}

function setStatus(ok, text) {
  const s = document.getElementById('status');
  s.dataset.ok = ok;
  s.textContent = text;
}

async function tick() {
  try {
    const [cluster, hist] = await Promise.all([fetchJson('/api/cluster'), fetchJson('/api/history?since=' + lastT)]);
    mergeHistory(hist);
    renderSummary(cluster);
    renderServers(cluster);
    renderTables(cluster);
    renderReplication(cluster);
    renderRecoveries(cluster);
    renderFailures(cluster);
    renderCharts(cluster);
    setStatus(true, 'updated ' + time(cluster.now_unix_ms));
    document.body.dataset.updated = cluster.now_unix_ms;
  } catch (e) {
    setStatus(false, 'cannot reach the coordinator: ' + e.message);
  }
  setTimeout(tick, POLL_MS);
}

tick();
