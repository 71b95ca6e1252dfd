// The console's calls to the dsync HTTP API (same origin only). With `api.token`
// set on the server, the token the operator typed is kept in sessionStorage (gone
// when the tab closes) and sent as `Authorization: Bearer`; a 401 answer raises
// AuthError and the app shows the sign-in form.

const TOKEN_KEY = 'dsync.console.token';

export class AuthError extends Error {}
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || '',
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

function headers(json) {
  const h = {Accept: 'application/json'};
  const t = token.get();
  if (t) h.Authorization = 'Bearer ' + t;
  if (json) h['Content-Type'] = 'application/json';
  return h;
}

export async function api(path, {method = 'GET', body, signal} = {}) {
  const r = await fetch(path, {
    method,
    headers: headers(method !== 'GET'),
    body: body === undefined ? undefined : JSON.stringify(body),
    cache: 'no-store',
    credentials: 'omit',
    signal,
  });
  if (r.status === 401) throw new AuthError('the API wants a token');
  let data = null;
  try {
    data = await r.json();
  } catch (e) {
    data = null;
  }
  if (!r.ok) throw new ApiError(r.status, (data && data.error) || 'HTTP ' + r.status);
  return data;
}

// Reads /v1/events/{code}/stream (server-sent events) with fetch, so that the
// bearer token can be sent (EventSource cannot send headers). Calls onMessage(type,
// data) for each message; resolves when the stream ends or `signal` aborts.
export async function stream(path, onMessage, signal) {
  const r = await fetch(path, {headers: headers(false), cache: 'no-store', credentials: 'omit', signal});
  if (r.status === 401) throw new AuthError('the API wants a token');
  if (!r.ok || !r.body) throw new ApiError(r.status, 'stream: HTTP ' + r.status);
  const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let type = 'message';
      const data = [];
      for (const line of block.split('\n')) {
        if (line.startsWith('event:')) type = line.slice(6).trim();
        else if (line.startsWith('data:')) data.push(line.slice(5).trimStart());
      }
      if (data.length) {
        let parsed = null;
        try {
          parsed = JSON.parse(data.join('\n'));
        } catch (e) {
          parsed = null;
        }
        onMessage(type, parsed);
      }
    }
  }
}
