// Mooncake master console: polls this master's own endpoints (same origin, same credentials)
// and draws them. Every figure comes from /metrics, /get_segments_detail,
// /api/v1/tenant_quotas, /health, /leader and /console/events; nothing else is fetched.
// On an HA standby (/health role "standby") only /metrics, /health and /leader exist: the
// page shows the standby's role, the leader's address and the standby's log lag.
'use strict';

const POLL_MS = 2000;        // metrics, segments, tenants
const EVENTS_MS = 1000;      // event stream
const HISTORY = 150;         // samples kept for the charts (5 minutes at POLL_MS)
const EVENTS_SHOWN = 50;
const ERRORS_SHOWN = 30;

const $ = (id) => document.getElementById(id);
const state = {
  up: null, prev: null, prevT: 0, hist: [], events: [], evFrom: 0, evEpoch: 0, errors: [],
};

function fmtBytes(n) {
  if (n === undefined || n === null || isNaN(n)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(Math.round(n))) + ' ' + u[i];
}
function fmtNum(n) {
  if (n === undefined || n === null || isNaN(n)) return '–';
  return Number.isInteger(n) ? n.toLocaleString('en') : n.toFixed(2);
}

// Prometheus text format -> {name: [{labels, value}]}
function parseProm(text) {
  const out = {};
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      const re = /(\w+)="((?:[^"\\]|\\.)*)"/g;
      let l;
      while ((l = re.exec(m[3]))) labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
    }
    (out[m[1]] = out[m[1]] || []).push({ labels, value: parseFloat(m[4]) });
  }
  return out;
}
const val = (p, name) => (p[name] && p[name].length ? p[name][0].value : 0);
const sumOf = (p, re) => Object.keys(p).filter((k) => re.test(k))
  .reduce((s, k) => s + p[k].reduce((a, x) => a + x.value, 0), 0);

async function get(path, json) {
  const r = await fetch(path, { cache: 'no-store', credentials: 'same-origin' });
  if (!r.ok) {
    const e = new Error(path + ': HTTP ' + r.status);
    e.status = r.status;
    throw e;
  }
  return json ? r.json() : r.text();
}

function setConn(cls, text) {
  const b = $('conn');
  b.className = 'badge ' + cls;
  b.textContent = text;
}

function addError(text) {
  const t = new Date().toLocaleTimeString();
  state.errors.unshift(t + '  ' + text);
  state.errors.length = Math.min(state.errors.length, ERRORS_SHOWN);
  const ul = $('errors');
  ul.replaceChildren(...state.errors.map((e) => { const li = document.createElement('li'); li.textContent = e; return li; }));
}

function card(id, label, value) {
  let c = $('card-' + id);
  if (!c) {
    c = document.createElement('div');
    c.className = 'card';
    c.id = 'card-' + id;
    c.innerHTML = '<div class="v"></div><div class="l"></div>';
    $('cards').appendChild(c);
  }
  c.querySelector('.v').textContent = value;
  c.querySelector('.l').textContent = label;
}

function cell(text, cls) {
  const td = document.createElement('td');
  if (cls) td.className = cls;
  if (text instanceof Node) td.appendChild(text); else td.textContent = text;
  return td;
}
function fillTable(id, rows) {
  const tb = $(id).tBodies[0];
  tb.replaceChildren(...rows.map((cells) => {
    const tr = document.createElement('tr');
    cells.forEach((c) => tr.appendChild(c));
    return tr;
  }));
}
function bar(frac) {
  const b = document.createElement('span');
  b.className = 'bar';
  const i = document.createElement('i');
  i.style.width = Math.max(0, Math.min(100, frac * 100)).toFixed(1) + '%';
  b.appendChild(i);
  return b;
}

// Counters whose increase is an error worth listing (name pattern -> label).
const ERROR_COUNTERS = [
  [/^master_\w+_failures_total$/, 'RPC failures'],
  [/^master_put_start_alloc_failures_total$/, 'allocation failures'],
  [/^master_attempted_evictions_failed_total$/, 'failed eviction rounds'],
  [/^mc_rpc_auth_failures_total$/, 'authentication failures'],
  [/^mooncake_tenant_quota_reject_total$/, 'puts over a tenant quota'],
  [/^mc_rpc_closed_\w+_total$/, 'connections closed'],
];

function noteErrors(p, prev) {
  if (!prev) return;
  for (const name of Object.keys(p)) {
    const rule = ERROR_COUNTERS.find(([re]) => re.test(name));
    if (!rule) continue;
    const now = p[name].reduce((a, x) => a + x.value, 0);
    const was = prev[name] ? prev[name].reduce((a, x) => a + x.value, 0) : 0;
    if (now > was) addError(rule[1] + ': ' + name + ' +' + (now - was));
  }
}

function renderMetrics(p, health, leader) {
  const now = Date.now();
  const prev = state.prev;
  const dt = prev ? (now - state.prevT) / 1000 : 0;
  const rate = (name) => (prev && dt > 0 ? Math.max(0, (val(p, name) - val(prev, name)) / dt) : 0);
  const lookups = val(p, 'master_get_replica_list_requests_total') + val(p, 'master_batch_get_replica_list_items_total');
  const misses = val(p, 'master_get_replica_list_failures_total') + val(p, 'master_batch_get_replica_list_failed_items_total');
  let hitRate = 0, missRate = 0;
  if (prev && dt > 0) {
    const pl = val(prev, 'master_get_replica_list_requests_total') + val(prev, 'master_batch_get_replica_list_items_total');
    const pm = val(prev, 'master_get_replica_list_failures_total') + val(prev, 'master_batch_get_replica_list_failed_items_total');
    missRate = Math.max(0, misses - pm) / dt;
    hitRate = Math.max(0, (lookups - pl) / dt - missRate);
  }
  const hitRatio = lookups ? (lookups - misses) / lookups : NaN;
  noteErrors(p, prev);
  state.prev = p;
  state.prevT = now;

  card('objects', 'objects', fmtNum(val(p, 'master_key_count')));
  card('writing', 'being written', fmtNum(val(p, 'master_writing_key_count')));
  card('leased', 'objects under a read lease', fmtNum(val(p, 'master_leased_key_count')));
  card('pinned', 'soft-pinned objects', fmtNum(val(p, 'master_soft_pin_key_count')));
  card('hardpinned', 'hard-pinned objects', fmtNum(val(p, 'master_hard_pin_key_count')));
  card('alloc', 'allocated', fmtBytes(val(p, 'master_allocated_bytes')));
  card('capacity', 'capacity', fmtBytes(val(p, 'master_total_capacity_bytes')));
  card('segments', 'mounted segments', fmtNum(val(p, 'master_mounted_segments')));
  card('recovering', 'recovering segments', fmtNum(val(p, 'master_recovering_segments')));
  card('clients', 'active clients', fmtNum(val(p, 'master_active_clients')));
  card('hitratio', 'lookup hit ratio (since start)', isNaN(hitRatio) ? '–' : (hitRatio * 100).toFixed(1) + ' %');
  card('evicted', 'objects evicted', fmtNum(val(p, 'master_evicted_key_count')));
  card('evictedbytes', 'bytes evicted', fmtBytes(val(p, 'master_evicted_size_bytes')));
  card('frag', 'fragmentation', (val(p, 'master_fragmentation_ratio') * 100).toFixed(1) + ' %');
  card('disk', 'disk tier objects / bytes / capacity', val(p, 'master_local_disk_clients')
    ? fmtNum(val(p, 'master_local_disk_key_count')) + ' / ' + fmtBytes(val(p, 'master_allocated_file_size_bytes'))
      + ' / ' + fmtBytes(val(p, 'master_total_file_capacity_bytes')) : 'none');
  card('events', 'object events', fmtNum(val(p, 'master_object_events_total')));
  card('rpcs', 'RPCs / s', fmtNum(Math.round(sumOf(p, /^master_\w+_requests_total$/) - (prev ? sumOf(prev, /^master_\w+_requests_total$/) : 0)) / (dt || 1)));

  state.hist.push({
    t: now, objects: val(p, 'master_key_count'), alloc: val(p, 'master_allocated_bytes'),
    cap: val(p, 'master_total_capacity_bytes'), hit: hitRate, miss: missRate,
    evict: rate('master_evicted_key_count'),
  });
  if (state.hist.length > HISTORY) state.hist.shift();
  drawChart('ch-objects', [{ k: 'objects', c: '#3a6fd8' }], fmtNum);
  drawChart('ch-bytes', [{ k: 'cap', c: '#aab' }, { k: 'alloc', c: '#3a6fd8' }], fmtBytes);
  drawChart('ch-hits', [{ k: 'hit', c: '#2a7a3b' }, { k: 'miss', c: '#a3262a' }], fmtNum);
  drawChart('ch-evict', [{ k: 'evict', c: '#a66b00' }], fmtNum);

  renderMasters(p, health, leader);
}

// masters: the elected leader (HA) and this one; a single master without HA is one row
function renderMasters(p, health, leader) {
  const role = health.role || 'unknown';
  $('role').textContent = role;
  $('role').className = 'badge ' + (role === 'leader' ? 'ok' : 'wait');
  const ha = leader && leader.present;
  const self = ha && leader.self;
  const lag = role === 'standby' ? fmtNum(val(p, 'master_ha_log_lag_batches')) + ' batches, '
    + val(p, 'master_ha_log_lag_seconds').toFixed(1) + ' s' : '–';
  const rows = [];
  if (ha && !self) rows.push([cell(leader.address), cell('leader'), cell('serving'), cell('–')]);
  rows.push([cell(location.host + (ha && self ? ' (' + leader.address + ')' : '') + ' — this page'),
    cell(role), cell(health.ha_state || ''), cell(ha ? lag : 'no HA (single master)')]);
  fillTable('masters', rows);
}

// A standby has no table: its role, the leader and its lag; the figures are the leader's.
function renderStandby(p, health, leader) {
  renderMasters(p, health, leader);
  const note = $('standby-note');
  note.hidden = false;
  note.textContent = 'This master is an HA standby (read-only): it replays the leader\'s log. '
    + (leader && leader.present ? 'Leader: ' + leader.address + ' — open its console for the cluster\'s figures.'
      : 'No leader elected right now.');
  card('lag', 'log lag (batches)', fmtNum(val(p, 'master_ha_log_lag_batches')));
  card('lagsec', 'log lag (seconds)', val(p, 'master_ha_log_lag_seconds').toFixed(1));
  card('failovers', 'failovers seen', fmtNum(val(p, 'master_ha_failovers_total')));
  card('leader', 'leader', leader && leader.present ? leader.address : 'none');
}

function drawChart(id, series, fmt) {
  const cv = $(id);
  const ctx = cv.getContext('2d');
  const W = cv.width, H = cv.height, pad = 18;
  ctx.clearRect(0, 0, W, H);
  const h = state.hist;
  let max = 0;
  for (const s of h) for (const sr of series) max = Math.max(max, s[sr.k]);
  max = max || 1;
  ctx.strokeStyle = '#e4e6ea';
  ctx.beginPath(); ctx.moveTo(0, H - pad); ctx.lineTo(W, H - pad); ctx.stroke();
  ctx.fillStyle = '#667';
  ctx.font = '10px system-ui, sans-serif';
  ctx.fillText(fmt(max), 2, 10);
  ctx.fillText('last ' + Math.round((HISTORY * POLL_MS) / 60000) + ' min', W - 60, H - 4);
  for (const sr of series) {
    ctx.strokeStyle = sr.c;
    ctx.lineWidth = 1.5;
    ctx.beginPath();
    h.forEach((s, i) => {
      const x = (W * (HISTORY - h.length + i)) / (HISTORY - 1);
      const y = H - pad - ((H - pad - 12) * s[sr.k]) / max;
      if (i) ctx.lineTo(x, y); else ctx.moveTo(x, y);
    });
    ctx.stroke();
  }
}

function renderSegments(d) {
  const segs = (d && d.segments) || [];
  $('seg-count').textContent = '(' + segs.length + ')';
  fillTable('segments', segs.map((s) => {
    const cap = s.allocator_capacity_bytes || s.size || 0;
    const used = s.allocator_used_bytes || 0;
    const pages = s.page_size ? (s.huge_pages ? 'huge ' : '') + fmtBytes(s.page_size) : '–';
    const disk = s.disk ? fmtNum(s.disk.objects) + ' obj, ' + fmtBytes(s.disk.bytes) + ' / ' + fmtBytes(s.disk.capacity_bytes) : '–';
    return [cell(s.name || s.segment_name), cell(s.host_label || ''), cell(s.endpoint || s.te_endpoint || ''),
      cell(s.state || s.status || ''), cell(pages, s.huge_pages ? 'huge' : ''), cell(fmtBytes(cap), 'num'),
      cell(fmtBytes(used), 'num'),
      cell(bar(cap ? used / cap : 0)), cell(s.largest_free !== undefined ? fmtBytes(s.largest_free) : '–', 'num'),
      cell(s.replicas !== undefined ? fmtNum(s.replicas) : '–', 'num'), cell(disk)];
  }));
  const disks = (d && d.disk_tiers) || [];
  $('disk-count').textContent = '(' + disks.length + ')';
  fillTable('disks', disks.map((t) => [cell(t.client_id), cell(t.endpoint), cell(fmtNum(t.objects), 'num'),
    cell(fmtBytes(t.bytes), 'num'), cell(fmtBytes(t.capacity_bytes), 'num'),
    cell(bar(t.capacity_bytes ? t.bytes / t.capacity_bytes : 0)), cell(t.offloading ? 'yes' : 'no'),
    cell(fmtNum(t.queued_tasks), 'num')]));
}

function renderTenants(p, quotas) {
  // objects and bytes per tenant: the tenant gauges of /metrics; with no tenants configured,
  // the whole store as one "default" row
  const names = new Set();
  for (const k of ['mooncake_tenant_objects', 'mooncake_tenant_quota_charged_bytes']) (p[k] || []).forEach((x) => names.add(x.labels.tenant_id));
  const by = (k, t) => { const e = (p[k] || []).find((x) => x.labels.tenant_id === t); return e ? e.value : 0; };
  let rows = [...names].sort().map((t) => [cell(t), cell(fmtNum(by('mooncake_tenant_objects', t)), 'num'),
    cell(fmtBytes(by('mooncake_tenant_quota_charged_bytes', t)), 'num'),
    cell(by('mooncake_tenant_quota_requested_bytes', t) ? fmtBytes(by('mooncake_tenant_quota_requested_bytes', t)) : 'none', 'num'),
    cell(fmtNum(by('mooncake_tenant_quota_reject_total', t)), 'num')]);
  if (!rows.length) rows = [[cell('(all, single tenant)'), cell(fmtNum(val(p, 'master_key_count')), 'num'),
    cell(fmtBytes(val(p, 'master_allocated_bytes')), 'num'), cell('none', 'num'), cell('0', 'num')]];
  fillTable('tenants', rows);
  void quotas;
}

async function pollMetrics() {
  try {
    const [text, health, leader] = await Promise.all([
      get('/metrics'), get('/health', true), get('/leader', true).catch(() => null)]);
    const p = parseProm(text);
    const standby = health.role === 'standby';
    if (state.standby !== undefined && standby !== state.standby) $('cards').replaceChildren(); // promoted
    state.standby = standby;
    if (state.standby) {
      renderStandby(p, health, leader);
    } else {
      $('standby-note').hidden = true;
      const segs = await get('/get_segments_detail', true);
      renderMetrics(p, health, leader);
      renderSegments(segs);
      renderTenants(p);
    }
    if (state.up !== true) setConn('ok', 'live');
    if (state.up === false) addError('master reachable again');
    state.up = true;
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  } catch (e) {
    lost(e);
  }
  setTimeout(pollMetrics, POLL_MS);
}

function lost(e) {
  if (e && e.status === 401) {
    setConn('bad', 'login needed (mooncake_auth_curl … /console/login_link)');
  } else {
    setConn('wait', 'reconnecting…');
    if (state.up !== false) addError('master unreachable: ' + (e && e.message ? e.message : e));
  }
  state.up = false;
}

async function pollEvents() {
  if (state.standby) { // a standby has no event log
    $('ev-info').textContent = '(on the leader)';
    setTimeout(pollEvents, EVENTS_MS);
    return;
  }
  try {
    const d = await get('/console/events?from=' + state.evFrom, true);
    if (d.standby) {
      $('ev-info').textContent = '(on the leader)';
    } else if (!d.enabled) {
      $('ev-info').textContent = '(event log disabled: --event_buffer_size=0)';
    } else if (d.gap || d.epoch !== state.evEpoch) {
      // new master epoch (a restart) or fell behind: restart from the recent tail
      if (state.evEpoch && d.epoch !== state.evEpoch) state.events = [];
      state.evEpoch = d.epoch;
      state.evFrom = Math.max(d.first_seq, d.next_seq - EVENTS_SHOWN);
      if (d.gap) { setTimeout(pollEvents, 0); return; }
    }
    if (d.enabled && !d.gap) {
      for (const ev of d.events) state.events.unshift(ev);
      state.events.length = Math.min(state.events.length, EVENTS_SHOWN);
      if (d.events.length) state.evFrom = d.events[d.events.length - 1].seq + 1;
      $('ev-info').textContent = '(epoch ' + d.epoch + ', next seq ' + d.next_seq + ')';
      fillTable('events', state.events.map((ev) => [cell(String(ev.seq), 'num'), cell(ev.kind, 'k-' + ev.kind),
        cell(ev.key), cell(ev.kind === 'segment_lost' ? '' : fmtBytes(ev.size), 'num'), cell(ev.segment)]));
    }
  } catch (e) {
    // the metrics poll reports connectivity; events just retry
  }
  setTimeout(pollEvents, EVENTS_MS);
}

pollMetrics();
pollEvents();
