// Captures (issue 36): each binlog capture of the service (GET /v1/captures) with its
// state, position, lags (reader; apply p50/p99 over the last 10 minutes), keys applied
// per second, backlog, the reader holding its lease, its paused tables (why, and what to
// run) and its last error. Read-only: `dsync capture resume NAME` continues a capture.
import {h, replace, fmtCount, fmtMs} from './dom.js';

export async function capturesView(main, ctx) {
  const body = h('div', {id: 'captures-body'});
  replace(main, h('h1', null, 'Captures'), body);

  async function render() {
    const {captures} = await ctx.api('/v1/captures');
    if (!ctx.isCurrent()) return;
    const ms = (v) => (v === null || v === undefined ? '—' : fmtMs(v));
    const rows = captures.map((c) => {
      const paused = Object.entries(c.paused_tables || {});
      const state = paused.length ? `${c.state}, ${paused.length} paused` : c.state;
      const bad = c.state === 'FAILED' || paused.length > 0 || c.events_failed > 0;
      return h('tr', {'data-capture': c.name, 'data-state': c.state},
        h('td', {class: 'code'}, c.name),
        h('td', null, `${c.source} → ${c.target}`),
        h('td', null, h('span', {class: ['badge', bad ? 'st-FAILED' : c.state === 'RUNNING' ? 'st-SUCCESS' : 'st-RUNNING']}, state)),
        h('td', {class: 'code'}, c.gtid || '—'),
        h('td', null, c.reader_lag_s === null ? '—' : `${c.reader_lag_s} s`),
        h('td', null, `${ms(c.applied.lag_p50_ms)} / ${ms(c.applied.lag_p99_ms)}`),
        h('td', null, c.applied.keys_per_s.toFixed(1)),
        h('td', null, fmtCount(c.row_changes)),
        h('td', null, fmtCount(c.events_pending)),
        h('td', null, fmtCount(c.events_failed)),
        h('td', {class: 'code'}, c.holder || h('span', {class: 'muted'}, 'none')));
    });
    const notes = [];
    for (const c of captures) {
      for (const [table, why] of Object.entries(c.paused_tables || {})) {
        notes.push(h('li', {'data-paused': `${c.name}:${table}`},
          h('strong', null, `${c.name}: table ${table} paused`), ': ', String(why),
          ' — align the target, then run ', h('code', null, `dsync capture resume ${c.name}`)));
      }
      if (c.last_error) {
        notes.push(h('li', {'data-error': c.name}, h('strong', null, `${c.name}: last error`), ': ', c.last_error,
          c.state === 'FAILED' ? [' — fix it, then run ', h('code', null, `dsync capture resume ${c.name}`)] : []));
      }
    }
    replace(body,
      captures.length
        ? h('table', {class: 'grid', id: 'captures'},
          h('caption', null, 'Binlog captures of this service (lag: source commit → apply on the target; ' +
            'apply lag over the last 10 minutes, binlog times have second precision)'),
          h('thead', null, h('tr', null, ['Capture', 'Source → target', 'State', 'Position (GTID)', 'Reader lag',
            'Apply lag p50 / p99', 'Keys/s', 'Row changes', 'Pending', 'Failed', 'Reader']
            .map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', null, rows))
        : h('p', {class: 'muted'}, 'No capture has run for this service (config captures; docs/capture.md).'),
      notes.length ? h('ul', {id: 'capture-notes'}, notes) : []);
    ctx.done('captures');
  }

  return ctx.live(render, 5000);
}
