// The dsync console: a hash router over seven views, the sign-in form, the confirmation
// dialog and the "live" loop the views refresh with. Views live in views_*.js; each is
// `async (main, ctx) => cleanup` and builds its DOM with dom.js (text only, never markup).
import {api, AuthError, token} from './api.js';
import {h, replace} from './dom.js';
import {overviewView} from './views_overview.js';
import {eventsView, eventView} from './views_events.js';
import {nodesView, batchesView, verifyView} from './views_ops.js';
import {topicsView} from './views_topics.js';
import {capturesView} from './views_captures.js';

const main = document.getElementById('main');
const statusLine = document.getElementById('status');
const signout = document.getElementById('signout');
let cleanup = null;
let generation = 0;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const q = raw.indexOf('?');
  const path = (q < 0 ? raw : raw.slice(0, q)).split('/').map((p) => decodeURIComponent(p));
  const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
  return {name: path[0] || 'overview', arg: path.slice(1).join('/'), params};
}

function setStatus(text, cls) {
  statusLine.textContent = text || '';
  statusLine.className = ['status', cls].filter(Boolean).join(' ');
}

// Asks for confirmation in the page's own dialog; resolves true on Confirm.
function confirmAction(title, text, okLabel) {
  const dialog = document.getElementById('confirm');
  document.getElementById('confirm-title').textContent = title;
  document.getElementById('confirm-text').textContent = text;
  const ok = document.getElementById('confirm-ok');
  const cancel = document.getElementById('confirm-cancel');
  ok.textContent = okLabel || 'Confirm';
  return new Promise((resolve) => {
    const done = (v) => {
      ok.removeEventListener('click', onOk);
      cancel.removeEventListener('click', onCancel);
      dialog.removeEventListener('cancel', onCancel);
      if (dialog.open) dialog.close();
      resolve(v);
    };
    const onOk = () => done(true);
    const onCancel = () => done(false);
    ok.addEventListener('click', onOk);
    cancel.addEventListener('click', onCancel);
    dialog.addEventListener('cancel', onCancel);
    dialog.showModal();
    cancel.focus();
  });
}

function showLogin(message) {
  if (cleanup) cleanup();
  cleanup = null;
  generation++;
  signout.hidden = true;
  document.body.dataset.view = 'login';
  const input = h('input', {id: 'token', type: 'password', autocomplete: 'current-password', required: true});
  const error = h('p', {class: 'error', role: 'alert'}, message || '');
  const form = h('form', {class: 'login', 'aria-labelledby': 'login-title'},
    h('h1', {id: 'login-title'}, 'Sign in to the dsync console'),
    h('p', null, 'This server requires its API token (api.token). It is kept in this tab only (sessionStorage).'),
    h('label', {for: 'token'}, 'API token'), input,
    h('button', {type: 'submit'}, 'Sign in'), error);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    token.set(input.value.trim());
    route();
  });
  replace(main, form);
  input.focus();
}

// Calls `fn` now and then every `ms` until the view changes; errors go to the status line.
function live(fn, ms) {
  const gen = generation;
  let timer = null;
  let stopped = false;
  const tick = async () => {
    if (stopped || gen !== generation) return;
    const started = performance.now();
    try {
      await fn();
      setStatus('live · updated ' + new Date().toLocaleTimeString('en-GB'), 'ok');
    } catch (e) {
      if (stopped || gen !== generation) return;  // a newer view (or sign-in) took over
      if (e instanceof AuthError) return showLogin(token.get() ? 'The token was not accepted.' : '');
      setStatus('update failed: ' + e.message, 'bad');
    }
    // A slow answer (a huge table, a busy database) slows the refresh down with it.
    if (!stopped && gen === generation) timer = setTimeout(tick, Math.max(ms, 4 * (performance.now() - started)));
  };
  tick();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

const views = {
  overview: overviewView,
  events: eventsView,
  event: eventView,
  nodes: nodesView,
  batches: batchesView,
  verify: verifyView,
  topics: topicsView,
  captures: capturesView,
};

async function route() {
  if (cleanup) cleanup();
  cleanup = null;
  const gen = ++generation;
  const r = parseHash();
  const view = views[r.name] || overviewView;
  for (const a of document.querySelectorAll('[data-nav]')) {
    const current = a.dataset.nav === r.name || (r.name === 'event' && a.dataset.nav === 'events');
    if (current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  signout.hidden = !token.get();
  setStatus('loading…');
  const ctx = {
    api, confirm: confirmAction, setStatus, params: r.params, arg: r.arg,
    live: (fn, ms) => live(fn, ms),
    isCurrent: () => gen === generation,
    done: (name) => {
      if (gen !== generation) return;
      document.body.dataset.view = name;
      document.body.dataset.renders = String(Number(document.body.dataset.renders || 0) + 1);
    },
  };
  try {
    const c = await view(main, ctx);
    if (gen === generation) cleanup = c || null;
    else if (c) c();
  } catch (e) {
    if (e instanceof AuthError) return showLogin(token.get() ? 'The token was not accepted.' : '');
    if (gen !== generation) return;
    setStatus('', null);
    replace(main, h('section', {class: 'panel'}, h('h1', null, 'Something went wrong'),
      h('p', {class: 'error', role: 'alert'}, e.message)));
    document.body.dataset.view = 'error';
  }
}

signout.addEventListener('click', () => {
  token.clear();
  showLogin('Signed out.');
});
window.addEventListener('hashchange', route);
route();
