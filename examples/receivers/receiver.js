#!/usr/bin/env node
// A dsync `http` step receiver in Node.js (standard library only).
//
// Forward action:  POST /refresh        -> "refreshes" data_id, once per Idempotency-Key
// Compensation:    POST /refresh/undo   -> undoes what that key's forward call did, once
//
// Both are idempotent by the Idempotency-Key header (the step code; the compensation's
// key is the step code + "-compensate"): a repeated call answers what the first answered
// and changes nothing again. State is kept in memory (use a table in real life).
//
//   node receiver.js PORT [JOURNAL_FILE]
// Each call is appended to JOURNAL_FILE as one line: "<method> <path> <key> <status>".
'use strict';
const http = require('http');
const fs = require('fs');

const answers = new Map();  // idempotency key -> [status, body] already given
const applied = new Map();  // data_id -> refreshes applied (the "side effect")
const journal = process.argv[3];

function reply(res, status, body) {
  const data = JSON.stringify(body);
  res.writeHead(status, {'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data)});
  res.end(data);
}

http.createServer((req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET') return reply(res, 200, {applied: Object.fromEntries(applied)});
    const key = req.headers['idempotency-key'] || '';
    let ctx = {};
    try { ctx = JSON.parse(Buffer.concat(chunks).toString() || '{}'); } catch (e) { return reply(res, 400, {error: 'not JSON'}); }
    let status, body;
    if (!key || (req.url !== '/refresh' && req.url !== '/refresh/undo')) {
      [status, body] = [400, {error: 'unknown action or no Idempotency-Key'}];
    } else if (answers.has(key)) {
      [status, body] = answers.get(key);  // a retry: the same answer, nothing applied again
    } else if (req.url === '/refresh') {
      const n = (applied.get(ctx.data_id) || 0) + 1;
      applied.set(ctx.data_id, n);
      [status, body] = [200, {refreshed: ctx.data_id, key, applied: n}];
      answers.set(key, [status, body]);
    } else {
      const forward = key.slice(0, -'-compensate'.length);
      const undone = answers.has(forward);
      if (undone) {
        applied.set(ctx.data_id, (applied.get(ctx.data_id) || 1) - 1);
        answers.delete(forward);
      }
      [status, body] = [200, {undone, key, applied: applied.get(ctx.data_id) || 0}];
      answers.set(key, [status, body]);
    }
    if (journal) fs.appendFileSync(journal, `${req.method} ${req.url} ${key} ${status}\n`);
    reply(res, status, body);
  });
}).listen(Number(process.argv[2]), '127.0.0.1');
