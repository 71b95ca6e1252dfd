// Events: the filtered, keyset-paged list (GET /v1/events), and one event with its
// saga drawn as a timeline, steps, process log, payload and result, live over the
// event's stream (GET /v1/events/{code}/stream) while it runs, and Retry.
import {h, replace, svg, statusBadge, fmtTime, fmtMs, between, pre, truncate, STATUSES, TERMINAL} from './dom.js';
import {stream, AuthError} from './api.js';

const FILTERS = [
  ['status', 'Status'], ['topic', 'Topic'], ['batch', 'Batch code'], ['tenant', 'Tenant'], ['code', 'Code prefix'],
];

function eventLink(code) {
  return h('a', {href: '#/event/' + encodeURIComponent(code)}, code);
}

function filterForm(params) {
  const fields = FILTERS.map(([key, label]) => {
    const id = 'f-' + key;
    const control = key === 'status'
      ? h('select', {id, name: key}, h('option', {value: ''}, 'any'),
        STATUSES.map((s) => h('option', {value: s, selected: params.get(key) === s}, s)))
      : h('input', {id, name: key, type: 'search', value: params.get(key) || '', autocomplete: 'off', spellcheck: 'false'});
    return h('div', {class: 'field'}, h('label', {for: id}, label), control);
  });
  const form = h('form', {class: 'filters', role: 'search', 'aria-label': 'Filter events'}, fields,
    h('button', {type: 'submit'}, 'Apply'),
    h('a', {href: '#/events', class: 'button quiet'}, 'Clear'));
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    for (const [key] of FILTERS) {
      const v = form.elements[key].value.trim();
      if (v) q.set(key, v);
    }
    location.hash = '#/events' + (q.toString() ? '?' + q : '');
  });
  return form;
}

export async function eventsView(main, ctx) {
  const q = new URLSearchParams();
  for (const [key] of FILTERS) if (ctx.params.get(key)) q.set(key, ctx.params.get(key));
  const after = ctx.params.get('after');
  const apiQuery = new URLSearchParams(q);
  apiQuery.set('limit', '50');
  if (after) apiQuery.set('after', after);
  const page = await ctx.api('/v1/events?' + apiQuery);
  if (!ctx.isCurrent()) return null;
  const rows = page.events.map((e) => h('tr', {'data-code': e.code},
    h('td', {class: 'num'}, String(e.id)),
    h('td', {class: 'code'}, eventLink(e.code)),
    h('td', null, e.topic), h('td', null, statusBadge(e.status)),
    h('td', null, e.tenant_id),
    h('td', null, e.batch_code ? h('a', {href: '#/batches?code=' + encodeURIComponent(e.batch_code)}, e.batch_code) : '—'),
    h('td', null, e.node_address || '—'),
    h('td', {class: 'num'}, String(e.retry_count)),
    h('td', null, fmtTime(e.create_time)),
    h('td', {class: 'err', title: e.last_error || ''}, truncate(e.last_error, 80))));
  const nav = h('nav', {class: 'pager', 'aria-label': 'Pages'},
    after ? h('a', {href: '#/events' + (q.toString() ? '?' + q : '')}, '« Newest') : null,
    page.next ? h('a', {href: '#/events?' + new URLSearchParams([...q, ['after', page.next]]), rel: 'next'}, 'Older »') : null);
  replace(main, h('h1', null, 'Events'), filterForm(ctx.params),
    page.events.length
      ? h('div', {class: 'scroll'}, h('table', {class: 'grid'}, h('caption', null, 'Newest first' + (after ? ` (ids below ${after})` : '')),
        h('thead', null, h('tr', null, ['Id', 'Code', 'Topic', 'Status', 'Tenant', 'Batch', 'Node', 'Retries', 'Created (UTC)', 'Last error']
          .map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', null, rows)))
      : h('p', {class: 'muted'}, 'No event matches.'),
    nav);
  ctx.setStatus('');
  ctx.done('events');
  return null;
}

// --- one event -------------------------------------------------------------------

const BOX_W = 168, BOX_H = 74, GAP = 34, LANE_F = 26, LANE_C = 150;

function stepBox(x, y, lane, s) {
  const failed = s.status === 'FAILED' || s.failed;
  const lines = [s.name, s.status + (s.failures ? ` · ${s.failures} failure${s.failures > 1 ? 's' : ''}` : ''),
    s.duration !== null && s.duration !== undefined ? fmtMs(s.duration) : (s.when ? fmtTime(s.when).slice(11) : '—'),
    s.node || '—'];
  return svg('g', {class: ['step', 'st-' + s.status, failed ? 'failed' : null], 'data-lane': lane,
    'data-step': s.name, transform: `translate(${x},${y})`},
  svg('title', null, `${lane === 'forward' ? 'execute' : 'compensate'} ${s.name}: ${s.status}` +
      (s.error ? ` — ${s.error}` : '')),
  svg('rect', {width: BOX_W, height: BOX_H, rx: 6}),
  lines.map((t, i) => svg('text', {x: 10, y: 18 + i * 16, class: i === 0 ? 'name' : 'meta'}, truncate(t, 24))),
  failed ? svg('text', {x: BOX_W - 20, y: 18, class: 'mark'}, '✕') : null,
  s.failures ? svg('text', {x: BOX_W - 38, y: 18, class: 'mark retry'}, '↻') : null);
}

function arrow(x1, y1, x2, y2, cls) {
  return svg('line', {x1, y1, x2, y2, class: ['arrow', cls], 'marker-end': 'url(#arrowhead)'});
}

// Forward steps left to right in plan order; compensations below, each under the step
// it undoes, numbered and linked right to left in the order they ran (the reverse).
function sagaDiagram(d) {
  const forward = d.steps.filter((s) => s.parent_step_id === null);
  const index = new Map(forward.map((s, i) => [s.code, i]));
  const execs = new Map(d.timeline.filter((t) => t.action === 'EXECUTE').map((t) => [t.step_code, t]));
  const comps = d.timeline.filter((t) => t.action === 'COMPENSATE');
  const W = Math.max(1, forward.length) * (BOX_W + GAP) + 20;
  const H = comps.length ? LANE_C + BOX_H + 16 : LANE_F + BOX_H + 16;
  const parts = [svg('defs', null, svg('marker', {id: 'arrowhead', viewBox: '0 0 10 10', refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse'}, svg('path', {d: 'M0,0 L10,5 L0,10 z'})))];
  parts.push(svg('text', {x: 8, y: 16, class: 'lane'}, 'forward →'));
  forward.forEach((s, i) => {
    const x = 10 + i * (BOX_W + GAP);
    const t = execs.get(s.code) || {};
    const done = s.executed_at || t.finished_at;
    if (i > 0) parts.push(arrow(x - GAP, LANE_F + BOX_H / 2, x - 2, LANE_F + BOX_H / 2));
    const status = s.status === 'COMPENSATED' || s.status === 'COMPENSATING' ? 'SUCCESS' : s.status;
    parts.push(stepBox(x, LANE_F, 'forward', {
      name: s.name, status: t.status && !['COMPENSATED', 'COMPENSATING'].includes(t.status) ? t.status : status,
      failures: s.retry_count, duration: between(s.started_at, done), node: s.node_address,
      error: s.status === 'FAILED' ? s.error : null,
    }));
  });
  if (comps.length) {
    parts.push(svg('text', {x: 8, y: LANE_C - 10, class: 'lane'}, '← compensation (ran right to left)'));
    let prevX = null;
    comps.forEach((t, n) => {
      const i = index.has(t.step_code) ? index.get(t.step_code) : n;
      const x = 10 + i * (BOX_W + GAP);
      parts.push(arrow(x + BOX_W / 2, LANE_F + BOX_H + 2, x + BOX_W / 2, LANE_C - 2, 'down'));
      if (prevX !== null) parts.push(arrow(prevX, LANE_C + BOX_H / 2, x + BOX_W + 2, LANE_C + BOX_H / 2, 'back'));
      parts.push(stepBox(x, LANE_C, 'compensate', {
        name: (n + 1) + '. ' + t.step_name, status: t.status, failures: t.failures, duration: null,
        when: t.finished_at, node: t.node_address, error: t.error,
      }));
      prevX = x - 2;
    });
  }
  return svg('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, class: 'saga', role: 'img',
    'aria-label': 'Saga timeline: forward ' + forward.map((s) => s.name).join(', ') +
      (comps.length ? '; compensated ' + comps.map((t) => t.step_name).join(', ') : '')}, parts);
}

function fields(e) {
  const rows = [['Status', statusBadge(e.status)], ['Phase', e.phase], ['Topic', e.topic], ['Tenant', e.tenant_id],
    ['Data id', e.data_id], ['Node', e.node_address || '—'], ['Attempt', String(e.attempt)],
    ['Retries', `${e.retry_count} of ${e.max_retry}`], ['Priority', String(e.priority)], ['Version', String(e.version)],
    ['Progress', e.progress === null ? '—' : e.progress + ' %'],
    ['Batch', e.batch_code ? h('a', {href: '#/batches?code=' + encodeURIComponent(e.batch_code)}, e.batch_code) : '—'],
    ['Trace', e.trace_id || '—'], ['Created', fmtTime(e.create_time)], ['Started', fmtTime(e.started_time)],
    ['Finished', fmtTime(e.finished_time)], ['Run time', fmtMs(between(e.started_time, e.finished_time))],
    ['Next run', fmtTime(e.next_run_time)]];
  // Per-step routing: a handed-on event's next step needs these datasources.
  if (e.route) rows.push(['Route', e.route]);
  return h('dl', {class: 'fields'}, rows.map(([k, v]) => [h('dt', null, k), h('dd', null, v)]));
}

function stepsTable(d) {
  return h('table', {class: 'grid'}, h('caption', null, 'Steps (plan order)'),
    h('thead', null, h('tr', null, ['#', 'Step', 'Type', 'Status', 'Node', 'Started', 'Executed', 'Compensated', 'Failures', 'Output / error']
      .map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', null, d.steps.map((s) => h('tr', {'data-step-row': s.name},
      h('td', {class: 'num'}, String(s.sort)), h('th', {scope: 'row'}, s.name), h('td', null, s.type),
      h('td', null, statusBadge(s.status)), h('td', null, s.node_address || '—'),
      h('td', null, fmtTime(s.started_at)), h('td', null, fmtTime(s.executed_at)), h('td', null, fmtTime(s.compensated_at)),
      h('td', {class: 'num'}, `${s.retry_count}` + (s.compensation_retry_count ? ` + ${s.compensation_retry_count} comp.` : '')),
      h('td', null, s.error ? h('pre', {class: 'data err'}, s.error) : null, s.output !== null ? pre(s.output) : null)))));
}

function processLog(log) {
  if (!log.length) return h('p', {class: 'muted'}, 'Empty.');
  return h('ol', {class: 'log'}, log.map((entry) => {
    if (entry && typeof entry === 'object' && !Array.isArray(entry)) {
      const {at, node, from, to, why, ...rest} = entry;
      return h('li', null, h('time', null, fmtTime(at ? at + 'Z' : '')), ' ',
        h('span', {class: 'code'}, node || ''), ' ', from ? statusBadge(from) : null, from || to ? ' → ' : '',
        to ? statusBadge(to) : null, ' ', h('span', {class: 'why'}, why || ''),
        Object.keys(rest).length ? pre(rest) : null);
    }
    return h('li', null, pre(entry));
  }));
}

export async function eventView(main, ctx) {
  const code = ctx.arg;
  const path = '/v1/events/' + encodeURIComponent(code);
  const abort = new AbortController();
  let inFlight = null;
  let again = false;
  let lastStatus = null;

  async function retry(from) {
    const label = from === 'start' ? 'from the start (every step runs again)' : 'from the failed step (SUCCESS steps are kept)';
    if (!await ctx.confirm('Retry this event?', `Event ${code} goes back to PENDING and runs ${label}.`, 'Retry')) return;
    try {
      await ctx.api(path + '/retry', {method: 'POST', body: {from}});
      ctx.setStatus('retry requested', 'ok');
      await load();
      if (!TERMINAL.has(lastStatus)) follow();
    } catch (e) {
      ctx.setStatus('retry failed: ' + e.message, 'bad');
    }
  }

  // Ends an event that will never run (POST .../cancel; the server refuses one that started).
  async function cancelEvent() {
    if (!await ctx.confirm('Cancel this event?', `Event ${code} ends FAILED ("cancelled: cancelled from the console") without running; events held behind it then run.`, 'Cancel event')) return;
    try {
      await ctx.api(path + '/cancel', {method: 'POST', body: {reason: 'cancelled from the console'}});
      ctx.setStatus('event cancelled', 'ok');
      await load();
    } catch (e) {
      ctx.setStatus('cancel failed: ' + e.message, 'bad');
    }
  }

  function render(d) {
    lastStatus = d.status;
    const canRetry = d.status === 'FAILED' || d.status === 'COMPENSATED';
    const b1 = h('button', {type: 'button', id: 'retry-failed', disabled: !canRetry}, 'Retry from failed step');
    const b2 = h('button', {type: 'button', id: 'retry-start', class: 'quiet', disabled: !canRetry}, 'Retry from start');
    b1.addEventListener('click', () => retry('failed_step'));
    b2.addEventListener('click', () => retry('start'));
    const canCancel = d.status === 'PENDING' || d.status === 'ASSIGNED';
    const b3 = h('button', {type: 'button', id: 'cancel-event', class: 'quiet', disabled: !canCancel}, 'Cancel event');
    b3.addEventListener('click', cancelEvent);
    replace(main, 
      h('p', {class: 'crumbs'}, h('a', {href: '#/events'}, 'Events'), ' / '),
      h('h1', {class: 'code', id: 'event-code'}, d.code),
      h('div', {class: 'actions'}, b1, b2, b3, TERMINAL.has(d.status) ? null : h('span', {class: 'live-dot'}, 'live')),
      d.last_error ? h('p', {class: 'error', id: 'last-error'}, d.last_error) : null,
      h('section', {class: 'panel', 'aria-labelledby': 'ev-s'}, h('h2', {id: 'ev-s'}, 'Saga'),
        d.steps.length ? h('div', {class: 'scroll'}, sagaDiagram(d)) : h('p', {class: 'muted'}, 'No step has run yet.')),
      h('div', {class: 'cols'},
        h('section', {class: 'panel', 'aria-labelledby': 'ev-f'}, h('h2', {id: 'ev-f'}, 'Event'), fields(d)),
        h('section', {class: 'panel', 'aria-labelledby': 'ev-p'}, h('h2', {id: 'ev-p'}, 'Payload'), pre(d.payload),
          h('h2', null, 'Result'), d.result === null ? h('p', {class: 'muted'}, 'None yet.') : pre(d.result))),
      d.steps.length ? h('section', {class: 'panel', 'aria-labelledby': 'ev-t'}, h('h2', {id: 'ev-t'}, 'Steps'),
        h('div', {class: 'scroll'}, stepsTable(d))) : null,
      h('section', {class: 'panel', 'aria-labelledby': 'ev-l'}, h('h2', {id: 'ev-l'}, 'Process log'), processLog(d.process_log || [])));
  }

  async function load() {
    if (inFlight) {
      again = true;
      return inFlight;
    }
    inFlight = (async () => {
      do {
        again = false;
        const d = await ctx.api(path, {signal: abort.signal});
        if (!ctx.isCurrent()) return;
        render(d);
        ctx.done('event');
      } while (again);
    })();
    try {
      await inFlight;
    } finally {
      inFlight = null;
    }
  }

  // While it is not terminal: every progress message of the stream re-reads the event.
  let following = false;
  async function follow() {
    if (following) return;
    following = true;
    try {
      await stream(path + '/stream', (type) => {
        if (type === 'progress' || type === 'end') load().catch(() => {});
      }, abort.signal);
    } catch (e) {
      if (e instanceof AuthError || abort.signal.aborted) return;
      ctx.setStatus('live updates stopped: ' + e.message, 'bad');
    } finally {
      following = false;
    }
  }

  await load();
  ctx.setStatus('');
  if (!TERMINAL.has(lastStatus)) follow();
  return () => abort.abort();
}
