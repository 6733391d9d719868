// probe explore: the page behind `probe explore` (docs/explore.md).
// Views: Heads (layer × head grid) → Head over positions (envelopes) →
// Row (one attention row); Text (tokens coloured by the head's metric).
'use strict';

const errors = [];
window.addEventListener('error', e => errors.push(String(e.message)));
window.addEventListener('unhandledrejection', e => errors.push('unhandled: ' + String(e.reason)));
const consoleError = console.error.bind(console);
console.error = (...a) => { errors.push(a.map(String).join(' ')); consoleError(...a); };

const params = new URLSearchParams(location.search);
const token = params.get('token') || '';
const $ = id => document.getElementById(id);
const state = { info: null, sel: null, overlays: [], view: null, row: null, tokens: new Map(), tokensKey: '', seriesRange: [0, 1], pending: 0 };
const LINE = 16, LINE_PX = 22;

async function api(path, signal) {
  state.pending++;
  try {
    const r = await fetch(path, { headers: token ? { 'X-Probe-Token': token } : {}, signal });
    const body = await r.json().catch(() => ({ error: r.statusText }));
    if (!r.ok) throw new Error(body.error || r.statusText);
    return body;
  } finally { state.pending--; }
}

function notice(msg) {
  const n = $('notice');
  n.textContent = msg;
  n.hidden = !msg;
}

function opt(select, values, value) {
  select.replaceChildren(...values.map(v => { const o = document.createElement('option'); o.value = o.textContent = v; return o; }));
  select.value = value;
}

function q(o) { return new URLSearchParams(Object.entries(o).map(([k, v]) => [k, String(v)])).toString(); }

const charts = {};
function chart(id) {
  if (!charts[id]) charts[id] = echarts.init($(id), null, { renderer: 'canvas' });
  return charts[id];
}

function T() { return +$('T').value; }
function sample() { return +$('sample').value; }
function metric() { return $('metric').value; }

async function init() {
  if (typeof echarts === 'undefined') {
    notice('echarts.min.js is not available, so no charts can be drawn: run `probe setup` once, or set PROBE_ECHARTS_JS.');
    return;
  }
  const info = state.info = await api('/api/info');
  $('folder').textContent = info.dir + ' — ' + (info.model.arch || '') + ', ' + info.model.layers + ' layers × ' + info.model.heads + ' heads' + (info.note ? ' — ' + info.note : '');
  // Folders without a per-position table (sinks, massive, experts) have the grid only.
  $('head-view').hidden = $('text-view').hidden = !info.series;
  $('row-view').hidden = !info.series && !info.rows;
  opt($('T'), info.lengths, info.lengths[info.lengths.length - 1]);
  opt($('sample'), Array.from({ length: info.samples }, (_, i) => i), 0);
  opt($('metric'), info.metrics, info.default_metric);
  opt($('window'), info.windows, 'all');
  const why = [];
  if (!info.rows) why.push('Rows are unavailable: ' + info.rows_reason);
  else if (!info.tokens) why.push('Token strings are unavailable: ' + info.tokens_reason);
  notice(why.join(' '));
  for (const id of ['T', 'metric', 'window']) $(id).addEventListener('change', () => { loadGrid(); if (state.sel) openHead(state.sel.layer, state.sel.head); });
  $('sample').addEventListener('change', () => { if (state.sel) openHead(state.sel.layer, state.sel.head); });
  $('ov-add').addEventListener('click', () => {
    const l = Math.round(+$('ov-layer').value), h = Math.round(+$('ov-head').value);
    if ($('ov-layer').value !== '' && $('ov-head').value !== '') addOverlay(l, h);
  });
  $('query').addEventListener('change', () => { const v = Math.round(+$('query').value); if (v >= 0 && v < T()) openRow(v); });
  $('text').addEventListener('scroll', () => { clearTimeout(state.textTimer); state.textTimer = setTimeout(drawText, 60); });
  window.addEventListener('resize', () => Object.values(charts).forEach(c => c.resize()));
  await loadGrid();
}

async function loadGrid() {
  const g = await api('/api/grid?' + q({ T: T(), metric: metric(), window: $('window').value }));
  state.grid = g;
  const data = [];
  let lo = Infinity, hi = -Infinity;
  g.mean.forEach((row, l) => row.forEach((v, h) => {
    data.push([h, l, v === null ? '-' : v]);
    if (v !== null) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
  }));
  if (!(lo <= hi)) { lo = 0; hi = 1; }
  $('grid-caption').textContent = g.metric + ', mean over the ' + g.window + ' queries of ' + g.samples + ' samples at T = ' + g.T +
    (state.info.series ? '' : state.info.rows ? ' (click a head for the row of its last query)' : ' (hover for the numbers)');
  const c = chart('grid');
  c.setOption({
    animation: false,
    tooltip: { formatter: p => 'layer ' + p.value[1] + ', ' + g.columns + ' ' + p.value[0] + '<br>' + g.metric + ' ' + fmt(p.value[2]) + ' ± ' + fmt(g.std[p.value[1]][p.value[0]]) + ' (n = ' + g.n[p.value[1]][p.value[0]] + ')' },
    grid: { left: 50, right: 20, top: 10, bottom: 100 },
    xAxis: { type: 'category', name: g.columns, nameLocation: 'middle', nameGap: 25, data: Array.from({ length: g.heads }, (_, i) => i) },
    yAxis: { type: 'category', name: 'layer', nameLocation: 'middle', nameGap: 35, data: Array.from({ length: g.layers }, (_, i) => i) },
    visualMap: { min: lo, max: hi, calculable: true, precision: Math.max(0, Math.min(6, 2 - Math.floor(Math.log10(Math.max(hi - lo, 1e-12))))), orient: 'horizontal', left: 'center', bottom: 0, itemHeight: 120, text: [fmt(hi), fmt(lo)], inRange: { color: ['#f7fbff', '#6baed6', '#08306b'] } },
    series: [{ type: 'heatmap', data, emphasis: { itemStyle: { borderColor: '#d62728', borderWidth: 2 } } }],
  }, true);
  c.off('click');
  c.on('click', p => {
    if (state.info.series && p.event && p.event.event && p.event.event.shiftKey && state.sel) addOverlay(p.value[1], p.value[0]);
    else if (state.info.series) openHead(p.value[1], p.value[0]);
    else if (state.info.rows) { state.sel = { layer: p.value[1], head: p.value[0] }; openRow(T() - 1); }
  });
  state.gridReady = true;
}

function fmt(x) {
  if (x === null || x === undefined || x === '-') return '–';
  const a = Math.abs(x);
  return a !== 0 && (a < 1e-3 || a >= 1e5) ? x.toExponential(3) : (+x.toPrecision(4)).toString();
}

async function openHead(layer, head) {
  state.sel = { layer, head };
  state.seriesRange = [0, T()];
  state.headStats = null;
  const c = chart('series');
  c.setOption({
    animation: false,
    tooltip: { trigger: 'axis', formatter: seriesTip },
    legend: { top: 0 },
    grid: { left: 60, right: 20, top: 30, bottom: 70 },
    xAxis: { type: 'value', name: 'query position', nameLocation: 'middle', nameGap: 25, min: 0, max: T() },
    yAxis: { type: 'value', name: metric(), scale: true },
    dataZoom: [{ type: 'inside', filterMode: 'none', minValueSpan: 4 }, { type: 'slider', filterMode: 'none', bottom: 8, height: 18 }],
    series: ['min', 'max', 'mean'].map(n => ({ name: n, type: 'line', showSymbol: false, connectNulls: false, data: [],
      lineStyle: n === 'mean' ? { width: 1.5, color: '#1f4e8c' } : { width: 0.8, color: '#9ecae1' }, itemStyle: { color: n === 'mean' ? '#1f4e8c' : '#9ecae1' } })),
  }, true);
  c.off('datazoom');
  c.on('datazoom', () => { clearTimeout(state.zoomTimer); state.zoomTimer = setTimeout(zoomed, 80); });
  c.getZr().off('click');
  c.getZr().on('click', e => {
    const p = c.convertFromPixel({ seriesIndex: 2 }, [e.offsetX, e.offsetY]);
    // A pixel can span several queries: the last pixel maps to T itself.
    if (p && p[0] >= 0 && p[0] <= T()) openRow(Math.min(T() - 1, Math.floor(p[0])));
  });
  $('text-caption').textContent = metric() + ' of layer ' + layer + ', head ' + head + ' per token (click a token for its row)';
  await loadSeries(0, T());
  $('text-spacer').style.height = Math.ceil(T() / LINE) * LINE_PX + 'px';
  await drawText();
}

function zoomed() {
  const dz = chart('series').getOption().dataZoom[0];
  const from = Math.max(0, Math.floor(dz.startValue)), to = Math.min(T(), Math.ceil(dz.endValue) + 1);
  if (to > from) loadSeries(from, to);
}

// OVERLAY are the colours of overlaid series (the open head is blue).
const OVERLAY = ['#d62728', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b', '#e377c2', '#17becf', '#7f7f7f', '#bcbd22'];

async function loadSeries(from, to) {
  const { layer, head } = state.sel;
  const px = Math.max(50, Math.min(4096, Math.floor($('series').clientWidth || 800)));
  const all = [state.sel, ...state.overlays];
  const r = await api('/api/series?' + q({ T: T(), sample: sample(), layer: all.map(x => x.layer).join(','), head: all.map(x => x.head).join(','), metric: metric(), from, to, buckets: px }));
  const s = r.series ? r.series[0] : r;
  s.overlays = r.series ? r.series.slice(1) : [];
  state.series = s;
  state.seriesRange = [from, to];
  if (!state.headStats) state.headStats = { min: Math.min(...s.min.filter(v => v !== null)), max: Math.max(...s.max.filter(v => v !== null)) };
  const x = i => (s.lo[i] + s.hi[i] - 1) / 2;
  const pts = a => a.map((v, i) => [x(i), v === null ? null : v]);
  $('series-caption').textContent = metric() + ', layer ' + layer + ', head ' + head + ', sample ' + sample() + ', queries [' + from + ', ' + to + ') in ' + s.lo.length + ' buckets (stored resolution ' + s.resolution + ')';
  const base = ['min', 'max', 'mean'].map(n => ({ name: n, type: 'line', showSymbol: false, connectNulls: false, data: pts(s[n]),
    lineStyle: n === 'mean' ? { width: 1.5, color: '#1f4e8c' } : { width: 0.8, color: '#9ecae1' }, itemStyle: { color: n === 'mean' ? '#1f4e8c' : '#9ecae1' } }));
  const over = s.overlays.map((o, i) => ({ name: 'L' + o.layer + ' H' + o.head + ' mean', type: 'line', showSymbol: false, connectNulls: false, data: pts(o.mean),
    lineStyle: { width: 1.2, color: OVERLAY[i % OVERLAY.length] }, itemStyle: { color: OVERLAY[i % OVERLAY.length] } }));
  chart('series').setOption({ series: base.concat(over) }, { replaceMerge: ['series'] });
  drawOverlayList();
  if (to - from <= 4000) await tokens(from, to);
  state.seriesReady = true;
}

function seriesTip(ps) {
  if (!ps.length || !state.series) return '';
  const s = state.series, pos = ps[0].value[0];
  const i = s.lo.findIndex((lo, k) => lo <= pos && pos < s.hi[k]);
  if (i < 0) return '';
  const tk = s.hi[i] - s.lo[i] === 1 && state.tokens.has(s.lo[i]) ? '<br>token ' + escapeHTML(JSON.stringify(state.tokens.get(s.lo[i]))) : '';
  const span = s.hi[i] - s.lo[i] === 1 ? 'query ' + s.lo[i] : 'queries [' + s.lo[i] + ', ' + s.hi[i] + ')';
  $('cursor').textContent = span + (tk ? ': ' + JSON.stringify(state.tokens.get(s.lo[i])) : '');
  const ov = s.overlays.map(o => '<br>L' + o.layer + ' H' + o.head + ' mean ' + fmt(o.mean[i])).join('');
  return span + '<br>mean ' + fmt(s.mean[i]) + '<br>min ' + fmt(s.min[i]) + ' · max ' + fmt(s.max[i]) + ov + tk;
}

// drawOverlayList shows the overlaid heads, each with a button removing it.
function drawOverlayList() {
  $('overlay-list').replaceChildren(...state.overlays.map((o, i) => {
    const b = document.createElement('button');
    b.className = 'chip';
    b.textContent = 'L' + o.layer + ' H' + o.head + ' ×';
    b.title = 'remove this series';
    b.style.borderColor = OVERLAY[i % OVERLAY.length];
    b.addEventListener('click', () => { state.overlays.splice(i, 1); loadSeries(...state.seriesRange); });
    return b;
  }));
}

// addOverlay overlays the mean of (layer, head) on the open head's series.
function addOverlay(layer, head) {
  if (!state.sel || state.overlays.length >= 15) return;
  if ((layer === state.sel.layer && head === state.sel.head) || state.overlays.some(o => o.layer === layer && o.head === head)) return;
  state.overlays.push({ layer, head });
  loadSeries(...state.seriesRange).catch(e => { state.overlays.pop(); notice(e.message); drawOverlayList(); });
}

function escapeHTML(s) { return s.replace(/[&<>"']/g, c => '&#' + c.charCodeAt(0) + ';'); }

async function tokens(from, to) {
  if (!state.info.tokens) return;
  const key = T() + '/' + sample();
  if (state.tokensKey !== key) { state.tokens = new Map(); state.tokensKey = key; }
  let a = from;
  while (a < to && state.tokens.has(a)) a++;
  let b = to;
  while (b > a && state.tokens.has(b - 1)) b--;
  if (a >= b) return;
  const r = await api('/api/tokens?' + q({ T: T(), sample: sample(), from: a, to: b }));
  r.tokens.forEach((t, i) => state.tokens.set(a + i, t));
  if (state.tokens.size > 200000) state.tokens = new Map();
}

async function drawText() {
  if (!state.sel) return;
  const box = $('text'), first = Math.floor(box.scrollTop / LINE_PX), n = Math.ceil(box.clientHeight / LINE_PX) + 2;
  const from = first * LINE, to = Math.min(T(), (first + n) * LINE);
  if (from >= to) return;
  const { layer, head } = state.sel;
  const [s] = await Promise.all([
    api('/api/series?' + q({ T: T(), sample: sample(), layer, head, metric: metric(), from, to, buckets: to - from })),
    tokens(from, to),
  ]);
  const { min, max } = state.headStats || { min: 0, max: 1 };
  const lines = [];
  for (let l = first; l * LINE < to; l++) {
    const div = document.createElement('div');
    div.className = 'line';
    const pos = document.createElement('span');
    pos.className = 'pos';
    pos.textContent = l * LINE;
    div.append(pos);
    for (let p = l * LINE; p < Math.min(to, (l + 1) * LINE); p++) {
      const sp = document.createElement('span');
      sp.className = 'tok';
      const v = s.mean[p - from];
      sp.textContent = state.tokens.has(p) ? state.tokens.get(p).replace(/\n/g, '⏎') : '·';
      sp.title = 'query ' + p + ': ' + metric() + ' ' + fmt(v);
      const f = v === null || max <= min ? 0 : Math.max(0, Math.min(1, (v - min) / (max - min)));
      sp.style.background = 'rgba(214, 39, 40, ' + (0.05 + 0.6 * f).toFixed(3) + ')';
      sp.addEventListener('click', () => openRow(p));
      div.append(sp);
    }
    lines.push(div);
  }
  $('text-lines').style.top = first * LINE_PX + 'px';
  $('text-lines').replaceChildren(...lines);
}

async function openRow(query) {
  if (!state.sel) return;
  const { layer, head } = state.sel;
  $('query').value = query;
  state.rowAsked = query;
  if (!state.info.rows) { $('row-caption').textContent = 'rows are unavailable: ' + state.info.rows_reason; return; }
  $('row-caption').textContent = 'computing the row of query ' + query + ' (layer ' + layer + ', head ' + head + ') …';
  const req = { T: T(), sample: sample(), layer, head, query };
  const stop = new AbortController();
  const progress = rowProgress(req, stop.signal);
  let r;
  try {
    r = await api('/api/row?' + q(req));
  } catch (e) {
    $('row-caption').textContent = e.message;
    return;
  } finally {
    stop.abort();
    await progress;
    $('row-progress-line').hidden = true;
  }
  state.row = r;
  const kind = r.kind === 'gated_deltanet' ? 'effective attention W[t, :] (Gated DeltaNet)' : 'softmax weights α[t, :]';
  $('row-caption').textContent = kind + ' of query ' + query + ' ' + JSON.stringify(r.tokens[query] || '') + ', layer ' + layer + ', head ' + head + ' (' + (r.cached ? 'cached' : r.seconds.toFixed(2) + ' s') + ', Σ = ' + fmt(r.sum) + ')';
  const marks = [{ xAxis: 0, name: 'sink (position 0)' }];
  if (r.window > 0 && query - r.window + 1 > 0) marks.push({ xAxis: query - r.window + 1, name: 'window start' });
  chart('row').setOption({
    animation: false,
    tooltip: { trigger: 'axis', formatter: ps => 'key ' + ps[0].value[0] + ' ' + escapeHTML(JSON.stringify(r.tokens[ps[0].value[0]] || '')) + '<br>weight ' + fmt(ps[0].value[1]) },
    grid: { left: 60, right: 30, top: 40, bottom: 60 },
    xAxis: { type: 'value', name: 'key position', nameLocation: 'middle', nameGap: 25, min: 0, max: query },
    yAxis: { type: 'value', name: 'weight', nameLocation: 'middle', nameGap: 45 },
    dataZoom: [{ type: 'inside', filterMode: 'none' }, { type: 'slider', filterMode: 'none', bottom: 8, height: 18 }],
    series: [{ type: 'line', step: 'middle', showSymbol: false, sampling: 'lttb', data: r.weights.map((w, j) => [j, w]), lineStyle: { width: 1, color: '#1f4e8c' }, itemStyle: { color: '#1f4e8c' },
      markLine: { symbol: 'none', label: { formatter: '{b}', position: 'insideEndBottom' }, lineStyle: { color: '#d62728', type: 'dashed' }, data: marks } }],
  }, true);
  $('top').tBodies[0].replaceChildren(...r.top.map(k => {
    const tr = document.createElement('tr');
    for (const v of [k.key, fmt(k.weight), JSON.stringify(k.token)]) { const td = document.createElement('td'); td.textContent = v; tr.append(td); }
    return tr;
  }));
}

// rowProgress shows how far the pass of row request req is until signal
// aborts: /api/status long-polled (each answer comes at the next change:
// a block done, the queue moving), so no timer runs while the row is
// computed. Each status seen is logged in state.progressLog (the self-test
// reports it).
async function rowProgress(req, signal) {
  state.progressLog = [];
  let since = '';
  while (!signal.aborted) {
    let st;
    try { st = await api('/api/status?' + q(req) + since, signal); } catch (e) { return; }
    if (signal.aborted) return;
    const me = st.request || { state: 'idle', ahead: 0 };
    state.progressLog.push({ state: me.state, ahead: me.ahead, layers_done: st.layers_done, layers: st.layers, tokens: st.tokens });
    let text = '';
    if (me.state === 'running') {
      $('row-progress').max = st.layers;
      $('row-progress').value = st.layers_done;
      text = 'blocks ' + st.layers_done + ' of ' + st.layers + ' done (the last through its heads), ' + st.tokens + ' tokens, ' + st.seconds.toFixed(1) + ' s';
    } else if (me.state === 'queued') {
      $('row-progress').removeAttribute('value'); // indeterminate
      text = 'queued: ' + me.ahead + ' pass' + (me.ahead === 1 ? '' : 'es') + ' to run before it';
    }
    $('row-progress-text').textContent = text;
    $('row-progress-line').hidden = !text;
    state.progressLog[state.progressLog.length - 1].shown = !$('row-progress-line').hidden && $('row-progress').getBoundingClientRect().width > 0;
    since = '&since=' + st.version;
  }
}

// ?selftest=1: click the grid, then the head's series, as a person would
// (mouse events on the charts), and report what happened in #selftest
// (the browser test reads it).
async function selftest() {
  const wait = async (cond, what) => {
    for (let i = 0; i < 400; i++) { if (cond()) return; await new Promise(r => setTimeout(r, 25)); }
    throw new Error('timed out waiting for ' + what);
  };
  const click = (id, x, y) => {
    const el = $(id).querySelector('canvas') || $(id), b = el.getBoundingClientRect();
    for (const type of ['mousemove', 'mousedown', 'mouseup', 'click']) el.dispatchEvent(new MouseEvent(type, { bubbles: true, clientX: b.left + x, clientY: b.top + y }));
  };
  const out = { errors };
  try {
    await wait(() => state.gridReady, 'the grid');
    const g = state.grid, L = g.layers - 1, H = g.heads - 1;
    out.grid = { layers: g.layers, columns: g.heads, axis: g.columns, kind: state.info.kind, series: state.info.series, rows: state.info.rows };
    const [gx, gy] = chart('grid').convertToPixel({ seriesIndex: 0 }, [H, L]);
    click('grid', gx, gy);
    if (!state.info.series) {
      // A grid-only folder: a head's cell opens the row of its last query, when there are rows.
      if (state.info.rows) {
        await wait(() => state.row, 'the row');
        out.head = state.sel;
        out.row = { layer: state.row.layer, head: state.row.head, query: state.row.query, weights: state.row.weights, tokens: state.row.tokens.length };
      }
    } else {
      await wait(() => state.sel && state.seriesReady, 'the head');
      out.head = state.sel;
      await new Promise(r => setTimeout(r, 100));
      const query = T() - 2;
      const [sx, sy] = chart('series').convertToPixel({ seriesIndex: 2 }, [query + 0.5, 0]);
      click('series', sx, Math.max(40, Math.min(sy, 200)));
      if (state.info.rows) {
        await wait(() => state.row, 'the row');
        out.row = { layer: state.row.layer, head: state.row.head, query: state.row.query, weights: state.row.weights, tokens: state.row.tokens.length };
      } else await wait(() => state.rowAsked !== undefined, 'the row asked');
      out.textLines = $('text-lines').children.length;
      // Overlay another head through the form, then remove it with its button.
      $('ov-layer').value = 0; $('ov-head').value = 1;
      $('ov-add').click();
      const names = () => chart('series').getOption().series.map(x => x.name);
      await wait(() => names().length === 4 && state.series.overlays.length === 1, 'the overlay');
      out.overlay = { names: names(), layer: state.series.overlays[0].layer, head: state.series.overlays[0].head, mean: state.series.overlays[0].mean, lo: state.series.lo, hi: state.series.hi, from: state.seriesRange[0], to: state.seriesRange[1] };
      $('overlay-list').querySelector('button').click();
      await wait(() => names().length === 3 && state.series.overlays.length === 0, 'the overlay removed');
      out.overlayRemoved = names();
    }
  } catch (e) { out.failure = String(e); }
  // ?only=<section id>: show that view alone (the screenshots in docs/), the head's view with an overlay.
  const only = params.get('only');
  if (only && $(only)) {
    try {
      if (only === 'head-view') { addOverlay(0, 1); await wait(() => state.series.overlays.length === 1, 'the overlay'); }
    } catch (e) { out.failure = String(e); }
    document.body.classList.add('only');
    $(only).classList.add('shown');
    Object.values(charts).forEach(c => c.resize());
    await new Promise(r => setTimeout(r, 200));
  }
  out.rowAsked = state.rowAsked;
  out.progress = state.progressLog;
  out.rowCaption = $('row-caption').textContent;
  out.scrollWidth = document.documentElement.scrollWidth;
  out.innerWidth = window.innerWidth;
  $('selftest').textContent = JSON.stringify(out);
  document.title = 'selftest done';
}

init().then(() => { if (params.get('selftest')) selftest(); }, e => { notice(e.message); console.error(e); });
