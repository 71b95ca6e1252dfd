// Overview: events by status and topic, throughput, events needing attention, live
// nodes and the dispatcher lease, from one call (GET /v1/overview) every 2 s.
import {h, replace, svg, statusBadge, fmtCount, fmtMs, bar, truncate, STATUSES} from './dom.js';

function eventLink(code) {
  return h('a', {href: '#/event/' + encodeURIComponent(code)}, code);
}

function statusCards(o) {
  return h('ul', {class: 'cards', 'aria-label': 'Events by status'},
    STATUSES.map((s) => h('li', {class: ['card', 'st-' + s]},
      h('a', {href: '#/events?status=' + s},
        h('span', {class: 'card-label'}, s),
        h('span', {class: 'card-value', 'data-count-status': s}, fmtCount((o.totals || {})[s]))))),
    h('li', {class: 'card'}, h('span', {class: 'card-label'}, 'TOTAL'),
      h('span', {class: 'card-value', 'data-count-total': ''}, fmtCount(o.total))));
}

function topicTable(o) {
  const topics = Object.keys(o.counts || {}).sort();
  if (!topics.length) return h('p', {class: 'muted'}, 'No events yet.');
  return h('table', {class: 'grid'},
    h('caption', null, 'Events by topic and status'),
    h('thead', null, h('tr', null, h('th', {scope: 'col'}, 'Topic'),
      STATUSES.map((s) => h('th', {scope: 'col', class: 'num'}, s)))),
    h('tbody', null, topics.map((t) => h('tr', {'data-topic': t},
      h('th', {scope: 'row'}, h('a', {href: '#/events?topic=' + encodeURIComponent(t)}, t)),
      STATUSES.map((s) => {
        const n = o.counts[t][s] || 0;
        return h('td', {class: ['num', n ? null : 'muted'], 'data-status': s}, fmtCount(n));
      })))));
}

// Events finished (and produced) per second between consecutive samples.
function throughputChart(samples) {
  const W = 560, H = 120, PAD = 28;
  if (!samples || samples.length < 2) {
    return h('p', {class: 'muted'}, 'Collecting samples: the chart fills while the console is open (one sample every 2 s, 15 minutes kept).');
  }
  const pts = [];
  for (let i = 1; i < samples.length; i++) {
    const dt = (samples[i - 1].age_ms - samples[i].age_ms) / 1000;
    if (dt <= 0) continue;
    pts.push({
      age: samples[i].age_ms,
      finished: Math.max(0, (samples[i].finished - samples[i - 1].finished) / dt),
      produced: Math.max(0, (samples[i].total - samples[i - 1].total) / dt),
    });
  }
  const span = Math.max(60000, samples[0].age_ms);
  const max = Math.max(1, ...pts.map((p) => Math.max(p.finished, p.produced)));
  const x = (age) => PAD + (W - PAD - 8) * (1 - age / span);
  const y = (v) => H - 18 - (H - 30) * (v / max);
  const line = (key) => pts.map((p) => x(p.age).toFixed(1) + ',' + y(p[key]).toFixed(1)).join(' ');
  const last = pts[pts.length - 1] || {finished: 0, produced: 0};
  const label = `Throughput over the last ${fmtMs(span)}: now ${last.finished.toFixed(1)} finished/s, ${last.produced.toFixed(1)} produced/s, peak ${max.toFixed(1)}/s`;
  return h('figure', {class: 'chart'},
    svg('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': label},
      svg('line', {x1: PAD, y1: H - 18, x2: W - 8, y2: H - 18, class: 'axis'}),
      svg('line', {x1: PAD, y1: 12, x2: PAD, y2: H - 18, class: 'axis'}),
      svg('text', {x: 2, y: 16, class: 'tick'}, max.toFixed(0) + '/s'),
      svg('text', {x: PAD, y: H - 4, class: 'tick'}, '−' + fmtMs(span)),
      svg('text', {x: W - 30, y: H - 4, class: 'tick'}, 'now'),
      svg('polyline', {points: line('produced'), class: 'line produced'}),
      svg('polyline', {points: line('finished'), class: 'line finished'})),
    h('figcaption', null, h('span', {class: 'key finished'}, 'finished/s ' + last.finished.toFixed(1)), ' ',
      h('span', {class: 'key produced'}, 'produced/s ' + last.produced.toFixed(1))));
}

// Why an event needs attention, as text: the detail the server gives (held behind
// which event and why, the due time of a delayed one, why a topic cannot run), else
// the last error, else how long a stuck one has been idle.
function attentionWhy(a) {
  if (a.detail) return a.detail;
  if (a.reason === 'stuck') return `no activity for ${fmtMs(a.idle_s * 1000)}` + (a.node_address ? ` on ${a.node_address}` : '');
  return a.last_error || '';
}

function attentionTable(o) {
  const rows = o.attention || [];
  if (!rows.length) return h('p', {class: 'ok-text'}, 'Nothing needs attention.');
  return h('table', {class: 'grid'},
    h('caption', null, `Events needing attention (failed, stuck, held behind a blocker, unknown or unroutable topic, no dispatcher, delayed; up to ${o.attention_limit} each)`),
    h('thead', null, h('tr', null, ['Reason', 'Event', 'Topic', 'Status', 'Entity', 'Why']
      .map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', null, rows.map((a) => h('tr', {'data-attention': a.reason, 'data-code': a.code},
      h('td', null, h('span', {class: ['reason', 'r-' + a.reason]}, a.reason.replaceAll('_', ' '))),
      h('td', {class: 'code'}, eventLink(a.code)),
      h('td', null, a.topic), h('td', null, statusBadge(a.status)),
      h('td', {class: 'code'}, `${a.tenant_id || ''}/${a.data_id || ''}`),
      h('td', {class: 'err', title: attentionWhy(a), 'data-why': ''}, whyCell(a))))));
}

// The why, with a held event's blocker as a link ("held behind <link> (its reason)").
function whyCell(a) {
  const why = attentionWhy(a);
  const head = 'held behind ' + (a.blocker_code || '');
  if (!a.blocker_code || !why.startsWith(head)) return truncate(why, 160);
  return ['held behind ', eventLink(a.blocker_code), truncate(why.slice(head.length), 160)];
}

export function nodeRows(nodes, extra) {
  return nodes.map((n) => h('tr', {'data-node': n.node_address},
    h('th', {scope: 'row', class: 'code'}, n.node_address),
    h('td', null, h('span', {class: ['badge', 'node-' + n.status]}, n.status)),
    h('td', {class: 'num'}, String(n.capacity)),
    h('td', null, bar(n.in_flight, n.capacity, `in flight ${n.in_flight} of ${n.capacity}`), ' ',
      h('span', {class: 'small'}, `${n.in_flight}/${n.capacity}`)),
    h('td', null, bar(n.load, 1, `load ${(n.load * 100).toFixed(0)} %`), ' ',
      h('span', {class: 'small'}, (n.load * 100).toFixed(0) + ' %')),
    h('td', {class: ['num', n.heartbeat_age_ms > 5000 ? 'warn' : null]}, fmtMs(n.heartbeat_age_ms)),
    extra ? extra(n) : null));
}

function nodesTable(nodes) {
  if (!nodes.length) return h('p', {class: 'warn'}, 'No live node: nothing will run.');
  return h('table', {class: 'grid'},
    h('caption', null, 'Live nodes'),
    h('thead', null, h('tr', null, ['Node', 'Status', 'Capacity', 'In flight', 'Load', 'Heartbeat age']
      .map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', null, nodeRows(nodes)));
}

function lease(l) {
  return h('p', {class: 'lease', 'data-lease-held': String(!!l.held)},
    l.held ? ['Dispatcher lease held by ', h('strong', {class: 'code'}, l.owner),
      ` (token ${l.token}, expires in ${fmtMs(l.expires_in_ms)})`]
      : h('span', {class: 'warn'}, 'No dispatcher holds the lease: nothing is being assigned.'));
}

// The counts by topic cost the database ~3x the counts by status on a big table: they
// come in a second call after the first render, then every 5th refresh (10 s).
export async function overviewView(main, ctx) {
  let first = true;
  let tick = 0;
  let topics = null;  // the last counts by topic
  const topicsPanel = () => h('section', {class: 'panel', 'aria-labelledby': 'topics-h', id: 'topics'},
    h('h2', {id: 'topics-h'}, 'Topics'),
    topics ? h('div', {class: 'scroll'}, topicTable(topics)) : h('p', {class: 'muted'}, 'Counting…'));
  return ctx.live(async () => {
    const o = await ctx.api('/v1/overview');
    if (!ctx.isCurrent()) return;
    replace(main,
      h('h1', null, 'Overview'),
      statusCards(o),
      h('div', {class: 'cols'},
        h('section', {class: 'panel', 'aria-labelledby': 'att-h'}, h('h2', {id: 'att-h'}, 'Needs attention'), attentionTable(o)),
        h('section', {class: 'panel', 'aria-labelledby': 'tp-h'}, h('h2', {id: 'tp-h'}, 'Throughput'), throughputChart(o.throughput))),
      h('section', {class: 'panel', 'aria-labelledby': 'nodes-h'}, h('h2', {id: 'nodes-h'}, 'Nodes'), lease(o.lease || {}),
        nodesTable(o.nodes || [])),
      topicsPanel());
    if (first) {
      first = false;
      document.body.dataset.overviewMs = String(Math.round(performance.now()));  // since navigation start
    }
    ctx.done('overview');
    if (tick++ % 5 === 0) {
      const t = await ctx.api('/v1/overview?topics=true');
      if (!ctx.isCurrent()) return;
      topics = t;
      const old = document.getElementById('topics');
      if (old) old.replaceWith(topicsPanel());
      document.body.dataset.topics = String(tick);
    }
  }, 2000);
}
