// DOM helpers of the dsync console. Every piece of data reaches the page as a text
// node (createTextNode / textContent) or an attribute value set by setAttribute:
// never as markup, so an event code, payload or error holding "<script>" or
// "<img onerror=...>" shows as those characters and runs nothing.

const SVG_NS = 'http://www.w3.org/2000/svg';

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === 'on') {
      for (const [type, fn] of Object.entries(v)) el.addEventListener(type, fn);
    } else if (k === 'class') {
      el.setAttribute('class', Array.isArray(v) ? v.filter(Boolean).join(' ') : v);
    } else if (k === 'style') {
      for (const [p, val] of Object.entries(v)) el.style.setProperty(p, val);  // CSSOM: allowed by the CSP
    } else {
      if (/^on/i.test(k)) throw new Error('inline event handlers are not used');
      el.setAttribute(k, v === true ? '' : String(v));
    }
  }
  return el;
}

// h('a', {href: '#/x', class: 'y'}, 'text', child, [more])
export function h(tag, attrs, ...children) {
  return append(setAttrs(document.createElement(tag), attrs), children);
}

// Replaces the children of `el` (skipping null/false, text as text nodes).
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

export function svg(tag, attrs, ...children) {
  return append(setAttrs(document.createElementNS(SVG_NS, tag), attrs), children);
}

export function statusBadge(status) {
  return h('span', {class: ['badge', 'st-' + status]}, status);
}

// "2026-11-24T07:50:01.123Z" -> "2026-11-24 07:50:01"
export function fmtTime(iso) {
  if (!iso || iso.startsWith('1970-01-01')) return '—';  // NULL, or "due at once" (next_run_time)
  return iso.replace('T', ' ').replace(/\.\d+Z$/, '').replace('Z', '');
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return '—';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  if (ms < 3600000) return Math.floor(ms / 60000) + ' min ' + Math.round((ms % 60000) / 1000) + ' s';
  return (ms / 3600000).toFixed(1) + ' h';
}

export function between(a, b) {
  if (!a || !b) return null;
  return Date.parse(b) - Date.parse(a);
}

export function fmtCount(n) {
  return Number(n || 0).toLocaleString('en-US');
}

// A bar of `value` out of `max` (0..1 filled), labelled for screen readers.
export function bar(value, max, label, cls) {
  const frac = max > 0 ? Math.max(0, Math.min(1, value / max)) : 0;
  return h('span', {class: ['bar', cls], role: 'img', 'aria-label': label, title: label},
    h('span', {class: ['fill', frac >= 0.9 ? 'hot' : null], style: {width: (frac * 100).toFixed(1) + '%'}}));
}

export function pre(value) {
  const text = typeof value === 'string' ? value : JSON.stringify(value, null, 2);
  return h('pre', {class: 'data'}, text);
}

export function truncate(s, n) {
  if (!s) return '';
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
}

export const STATUSES = ['PENDING', 'ASSIGNED', 'RUNNING', 'SUCCESS', 'FAILED', 'COMPENSATING', 'COMPENSATED'];
export const TERMINAL = new Set(['SUCCESS', 'FAILED', 'COMPENSATED']);
