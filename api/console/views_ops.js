// Nodes (live nodes, their topics, reachable datasources, load history, Drain),
// Batches (progress of one batch code by status, live) and Verify (the latest result
// per topic or table, filter and target: GET /v1/verify, i.e. v_verify_latest).
import {h, replace, svg, fmtMs, fmtCount, STATUSES} from './dom.js';
import {nodeRows} from './views_overview.js';

// In-flight/capacity per node, sampled while the Nodes or Overview page polls, for the
// page's lifetime (kept across page changes, lost on reload).
const history = new Map();
const HISTORY_MAX = 150;  // 5 minutes at one sample every 2 s

function remember(nodes) {
  const now = Date.now();
  for (const n of nodes) {
    const list = history.get(n.node_address) || [];
    list.push({t: now, v: n.capacity > 0 ? n.in_flight / n.capacity : 0});
    while (list.length > HISTORY_MAX) list.shift();
    history.set(n.node_address, list);
  }
}

function sparkline(address) {
  const list = history.get(address) || [];
  const W = 150, H = 28;
  if (list.length < 2) return h('span', {class: 'muted small'}, 'sampling…');
  const t0 = list[0].t, span = Math.max(1, list[list.length - 1].t - t0);
  const points = list.map((p) => `${(2 + (W - 4) * (p.t - t0) / span).toFixed(1)},${(H - 2 - (H - 4) * Math.min(1, p.v)).toFixed(1)}`).join(' ');
  const peak = Math.max(...list.map((p) => p.v));
  return svg('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'spark', role: 'img',
    'aria-label': `in-flight/capacity over the last ${fmtMs(span)}, peak ${(peak * 100).toFixed(0)} %`},
  svg('rect', {x: 0, y: 0, width: W, height: H, class: 'spark-bg'}),
  svg('polyline', {points, class: 'line finished'}));
}

export async function nodesView(main, ctx) {
  async function drain(address) {
    const ok = await ctx.confirm('Drain this node?',
      `Node ${address} will take no new events, finish what it holds and exit.`, 'Drain');
    if (!ok) return;
    try {
      await ctx.api('/v1/nodes/' + encodeURIComponent(address) + '/drain', {method: 'POST'});
      ctx.setStatus(`drain requested for ${address}`, 'ok');
    } catch (e) {
      ctx.setStatus('drain failed: ' + e.message, 'bad');
    }
  }
  return ctx.live(async () => {
    const [{nodes}, all] = await Promise.all([ctx.api('/v1/nodes'), ctx.api('/v1/nodes?all=true')]);
    if (!ctx.isCurrent()) return;
    remember(nodes);
    const extra = (n) => {
      const button = h('button', {type: 'button', class: 'danger small-button', 'data-drain': n.node_address,
        disabled: n.status !== 'online', 'aria-label': 'Drain ' + n.node_address}, n.status === 'draining' ? 'Draining' : 'Drain');
      button.addEventListener('click', () => drain(n.node_address));
      const ds = Array.isArray(n.datasources) ? n.datasources : null;
      return [h('td', null, n.topics && n.topics.length ? n.topics.join(', ') : h('span', {class: 'muted'}, 'all')),
        h('td', null, ds ? (ds.length ? ds.map((d) => typeof d === 'string' ? d : JSON.stringify(d)).join(', ') : 'none')
          : h('span', {class: 'muted'}, 'not reported')),
        h('td', null, sparkline(n.node_address)), h('td', null, button)];
    };
    const offline = all.nodes.filter((n) => n.status === 'offline');
    replace(main, h('h1', null, 'Nodes'),
      nodes.length
        ? h('table', {class: 'grid'}, h('caption', null, 'Live nodes'),
          h('thead', null, h('tr', null, ['Node', 'Status', 'Capacity', 'In flight', 'Load', 'Heartbeat age', 'Topics',
            'Datasources', 'Load history', 'Action'].map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', null, nodeRows(nodes, extra)))
        : h('p', {class: 'warn'}, 'No live node.'),
      offline.length ? h('section', {class: 'panel'}, h('h2', null, 'Offline (registry rows)'),
        h('ul', null, offline.map((n) => h('li', {class: 'code'}, `${n.node_address} — last heartbeat ${fmtMs(n.heartbeat_age_ms)} ago`))))
        : null);
    ctx.done('nodes');
  }, 2000);
}

export async function batchesView(main, ctx) {
  const code = ctx.params.get('code') || '';
  const input = h('input', {id: 'batch-code', name: 'code', type: 'search', value: code, required: true, autocomplete: 'off'});
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': 'Show a batch'},
    h('div', {class: 'field'}, h('label', {for: 'batch-code'}, 'Batch code'), input),
    h('button', {type: 'submit'}, 'Show'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    location.hash = '#/batches?code=' + encodeURIComponent(input.value.trim());
  });
  const out = h('div', {id: 'batch'});
  replace(main, h('h1', null, 'Batches'), form, out);
  if (!code) {
    out.append(h('p', {class: 'muted'}, 'Enter a batch code (POST /v1/batches, dsync produce --batch).'));
    ctx.setStatus('');
    ctx.done('batches');
    return null;
  }
  return ctx.live(async () => {
    let b;
    try {
      b = await ctx.api('/v1/batches/' + encodeURIComponent(code));
    } catch (e) {
      if (e.status === 404) {
        replace(out, h('p', {class: 'warn'}, 'No event has this batch code.'));
        ctx.done('batches');
        return;
      }
      throw e;
    }
    if (!ctx.isCurrent()) return;
    const segments = STATUSES.filter((s) => b.by_status[s]).map((s) => h('span', {
      class: ['seg', 'st-' + s], 'data-status': s, title: `${s}: ${b.by_status[s]}`,
      style: {width: (100 * b.by_status[s] / b.total).toFixed(2) + '%'},
    }));
    replace(out, h('section', {class: 'panel'},
      h('h2', {class: 'code'}, b.batch_code),
      h('p', null, h('strong', {'data-percent': ''}, b.percent_done.toFixed(1) + ' %'),
        ` done: ${fmtCount(b.terminal)} of ${fmtCount(b.total)} events terminal`),
      h('div', {class: 'stack', role: 'img', 'aria-label': STATUSES.filter((s) => b.by_status[s]).map((s) => `${s} ${b.by_status[s]}`).join(', ')}, segments),
      h('ul', {class: 'legend'}, STATUSES.filter((s) => b.by_status[s]).map((s) => h('li', null,
        h('span', {class: ['swatch', 'st-' + s]}), h('a', {href: `#/events?batch=${encodeURIComponent(code)}&status=${s}`}, s),
        ' ', h('span', {'data-batch-status': s}, fmtCount(b.by_status[s]))))),
      h('p', null, h('a', {href: '#/events?batch=' + encodeURIComponent(code)}, 'List its events'))));
    ctx.done('batches');
  }, 1000);
}

export async function verifyView(main, ctx) {
  return ctx.live(async () => {
    const {results} = await ctx.api('/v1/verify');
    if (!ctx.isCurrent()) return;
    const keys = (r) => {
      const f = r.first_keys || {};
      const parts = [['missing', f.missing_in_target], ['extra', f.extra_in_target], ['different', f.different]]
        .filter(([, list]) => Array.isArray(list) && list.length)
        .map(([what, list]) => `${what}: ${list.slice(0, 3).map((k) => JSON.stringify(k)).join(' ')}`);
      return parts.length ? parts.join('; ') : '';
    };
    replace(main, h('h1', null, 'Verify'),
      results.length
        ? h('table', {class: 'grid', id: 'verify-results'},
          h('caption', null, 'Latest verify result per topic or table, filter and target (dsync verify, POST /v1/verify)'),
          h('thead', null, h('tr', null, ['Subject', 'Filter', 'Table', 'Source → target', 'Result', 'Rows (source/target)',
            'Missing', 'Extra', 'Different', 'First differing keys', 'Age'].map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', null, results.map((r) => h('tr', {'data-verify-subject': r.subject, 'data-verify-table': r.table,
            'data-verify-equal': String(r.equal)},
          h('td', null, h('span', {class: 'muted small'}, r.subject_kind + ' '), r.subject),
          h('td', {class: 'code small'}, r.filter.length > 60 ? r.filter.slice(0, 57) + '…' : r.filter),
          h('td', {class: 'code'}, r.table),
          h('td', null, `${r.source} → ${r.target}`),
          h('td', null, h('span', {class: ['badge', r.equal ? 'st-SUCCESS' : 'st-FAILED']}, r.equal ? 'equal' : 'different')),
          h('td', null, `${fmtCount(r.source_rows)} / ${fmtCount(r.target_rows)}`),
          h('td', null, fmtCount(r.missing_in_target_total)),
          h('td', null, fmtCount(r.extra_in_target_total)),
          h('td', null, fmtCount(r.different_total)),
          h('td', {class: 'code small', 'data-verify-keys': ''}, keys(r)),
          h('td', null, fmtMs(r.age_seconds * 1000) + ' ago')))))
        : h('section', {class: 'panel', id: 'verify-empty'},
          h('p', null, 'No verify result yet. Run ', h('code', null, 'dsync verify'), ' or ',
            h('code', null, 'POST /v1/verify'), ': each run is recorded and its latest result per table shows here.')));
    ctx.done('verify');
  }, 2000);
}
