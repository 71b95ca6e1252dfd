// Topics (issue 37): the service's topics with their pause (who, when, why) and a
// Pause / Resume button each (POST /v1/topics/{topic}/pause|resume, confirmed in the
// page's dialog; the reason comes from the field above the table), then the schedules
// with their next and last runs (GET /v1/schedules).
import {h, replace, fmtCount} from './dom.js';

export async function topicsView(main, ctx) {
  const reason = h('input', {id: 'pause-reason', name: 'reason', type: 'text', maxlength: 512, autocomplete: 'off',
    placeholder: 'why (shown with the pause)'});
  const tables = h('div', {id: 'topics-tables'});
  replace(main, h('h1', null, 'Topics'),
    h('div', {class: 'filters'}, h('div', {class: 'field'}, h('label', {for: 'pause-reason'}, 'Pause reason'), reason)),
    tables);

  async function act(topic, paused) {
    const verb = paused ? 'Resume' : 'Pause';
    const text = paused
      ? `Topic ${topic}: its due events are assigned again from the next dispatch cycle.`
      : `Topic ${topic}: no event of it is assigned until it is resumed; running events finish.`;
    if (!await ctx.confirm(`${verb} this topic?`, text, verb)) return;
    try {
      const path = '/v1/topics/' + encodeURIComponent(topic) + (paused ? '/resume' : '/pause');
      await ctx.api(path, paused ? {method: 'POST'} : {method: 'POST', body: {reason: reason.value.trim(), by: 'console'}});
      ctx.setStatus(`${topic} ${paused ? 'resumed' : 'paused'}`, 'ok');
      await render();  // show it now, not at the next refresh
    } catch (e) {
      ctx.setStatus(`${verb.toLowerCase()} failed: ` + e.message, 'bad');
    }
  }

  async function render() {
    const [{topics}, {schedules}] = await Promise.all([ctx.api('/v1/topics'), ctx.api('/v1/schedules')]);
    if (!ctx.isCurrent()) return;
    const rows = topics.map((t) => {
      const button = h('button', {type: 'button', class: [t.paused ? '' : 'danger', 'small-button'],
        'data-topic-action': t.paused ? 'resume' : 'pause', 'aria-label': (t.paused ? 'Resume ' : 'Pause ') + t.topic},
      t.paused ? 'Resume' : 'Pause');
      button.addEventListener('click', () => act(t.topic, t.paused));
      return h('tr', {'data-topic': t.topic, 'data-paused': String(t.paused)},
        h('td', {class: 'code'}, t.topic),
        h('td', null, h('span', {class: ['badge', t.paused ? 'st-FAILED' : 'st-SUCCESS']}, t.paused ? 'paused' : 'active')),
        h('td', null, fmtCount(t.pending)),
        h('td', null, t.configured ? 'yes' : h('span', {class: 'muted'}, 'no')),
        h('td', null, t.pause ? t.pause.paused_by : ''),
        h('td', null, t.pause ? t.pause.paused_at : ''),
        h('td', null, t.pause ? t.pause.reason : ''),
        h('td', null, button));
    });
    replace(tables,
      topics.length
        ? h('table', {class: 'grid', id: 'topics'}, h('caption', null, 'Topics of this service (configured, paused or with PENDING events)'),
          h('thead', null, h('tr', null, ['Topic', 'State', 'Pending', 'Configured', 'Paused by', 'Paused at', 'Reason', 'Action']
            .map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', null, rows))
        : h('p', {class: 'muted'}, 'No topic.'),
      h('h2', null, 'Schedules'),
      schedules.length
        ? h('table', {class: 'grid', id: 'schedules'}, h('caption', null, 'Config schedules: one event per cron tick (UTC), produced by the dispatcher leader'),
          h('thead', null, h('tr', null, ['Name', 'Cron (UTC)', 'Topic', 'Missed ticks', 'Next tick', 'Last tick', 'Last run at',
            'Skipped', 'Last event'].map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', null, schedules.map((s) => h('tr', {'data-schedule': s.name},
            h('td', {class: 'code'}, s.name), h('td', {class: 'code'}, s.cron), h('td', null, s.topic),
            h('td', null, s.configured ? s.missed : h('span', {class: 'muted'}, 'no longer configured')),
            h('td', null, s.next_tick ? s.next_tick + (s.next_tick_source === 'computed' ? ' (computed)' : '') : '—'),
            h('td', null, s.last_tick || 'never'), h('td', null, s.last_run_at || '—'), h('td', null, fmtCount(s.skipped_ticks)),
            h('td', {class: 'code'}, s.last_event_code
              ? h('a', {href: '#/event/' + encodeURIComponent(s.last_event_code)}, s.last_event_code) : '—')))))
        : h('p', {class: 'muted'}, 'No schedule (config schedules).'));
    ctx.done('topics');
  }

  // GET /v1/topics counts PENDING events by topic (a range of idx_due): every 5 s, not 2.
  return ctx.live(render, 5000);
}
