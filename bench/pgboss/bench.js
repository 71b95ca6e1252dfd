// The peer of dsync's end-to-end benchmark: pg-boss (version pinned in package.json)
// processing no-op jobs on a throwaway PostgreSQL, run by `scripts/bench.sh pgboss`.
//
//   NODE_PATH=build-bench/pgboss/node_modules node bench/pgboss/bench.js \
//     --host 127.0.0.1 --port P --user U --database D [--jobs 20000] [--workers 4]
//     [--batch-size 100] [--mode loop|work] [--queue NAME] [--work noop|insert]
//
// One run: a fresh queue; the workers start first and poll the empty queue; then all
// jobs are inserted with one boss.insert() (one statement, like dsync's one multi-row
// INSERT); the clock runs from the start of that insert to the last completion:
//   e2e_seconds      insert start -> last job completed (dsync: first create_time ->
//                    last finished_time);
//   process_seconds  insert committed -> last job completed.
// Modes (batch fetch + batch complete in both):
//   loop  (default, pg-boss's fastest): each worker is an async loop of
//         boss.fetch(queue, {batchSize}) -> no-op -> boss.complete(queue, ids), one
//         statement each; an empty fetch sleeps 5 ms. Nothing waits on a poll interval.
//   work  each worker is boss.work(queue, {batchSize, pollingIntervalSeconds: 0.5}); the
//         handler gets the batch as an array and pg-boss completes it with one
//         complete(ids). pg-boss's worker loop waits out the rest of the 0.5 s interval
//         after every batch, so this mode is bounded by workers * batchSize / 0.5 s;
//         the end is found by polling the job table every 20 ms.
// Work per job (--work, issue 37: the same work as dsync's steps):
//   noop    (default) nothing: the peer of dsync's `noop` step;
//   insert  one row per job in bench_ledger (job id unique, as dsync's demo_ledger's
//           idempotency key) in the same database, one multi-row INSERT per fetched
//           batch (the batching pg-boss allows: fetch, insert, complete), committed
//           before the batch's complete (pg-boss completes in its own statement; dsync's
//           `demo` writes its row in the step's transaction): the peer of `demo`.
//           Loop mode only.
// Prints one line: PGBOSS mode=.. jobs=.. workers=.. batch_size=.. insert_seconds=..
//   e2e_seconds=.. process_seconds=.. jobs_per_s=.. (jobs / e2e_seconds)
//   process_jobs_per_s=.. completed=..   and exits non-zero if not every job completed.
'use strict'

const PgBoss = require('pg-boss')

function parseArgs (argv) {
  const o = { host: '127.0.0.1', port: 5432, user: 'postgres', database: 'postgres', jobs: 20000, workers: 4, batchSize: 100, mode: 'loop', queue: `bench_${process.pid}_${Date.now()}`, work: 'noop' }
  const numeric = new Set(['port', 'jobs', 'workers', 'batchSize'])
  for (let i = 2; i < argv.length; i++) {
    const flag = argv[i]
    const key = flag.replace(/^--/, '').replace(/-([a-z])/g, (_, c) => c.toUpperCase())
    if (!(key in o) || i + 1 >= argv.length) throw new Error(`bad flag ${flag}`)
    const v = argv[++i]
    o[key] = numeric.has(key) ? Number(v) : v
    if (numeric.has(key) && !(o[key] > 0)) throw new Error(`${flag}: not a positive number: ${v}`)
  }
  if (!['loop', 'work'].includes(o.mode)) throw new Error(`--mode: loop or work, not ${o.mode}`)
  if (!['noop', 'insert'].includes(o.work)) throw new Error(`--work: noop or insert, not ${o.work}`)
  if (o.work === 'insert' && o.mode !== 'loop') throw new Error('--work insert needs --mode loop')
  return o
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))
const now = () => Number(process.hrtime.bigint()) / 1e9

async function main () {
  const o = parseArgs(process.argv)
  // schedule/supervise off: no cron or maintenance work competing during the run.
  const boss = new PgBoss({ host: o.host, port: o.port, user: o.user, database: o.database, max: o.workers + 2, schedule: false, supervise: false })
  boss.on('error', err => { console.error('pg-boss error:', err.message); process.exitCode = 1 })
  await boss.start()
  await boss.createQueue(o.queue)
  const db = boss.getDb()
  if (o.work === 'insert') {
    await db.executeSql('CREATE TABLE IF NOT EXISTS bench_ledger (id bigserial PRIMARY KEY, job_id uuid NOT NULL UNIQUE, ' +
      'queue text NOT NULL, created_on timestamptz NOT NULL DEFAULT now())')
  }
  const insertRows = o.work === 'insert'
    ? ids => db.executeSql('INSERT INTO bench_ledger (job_id, queue) SELECT unnest($1::uuid[]), $2', [ids, o.queue])
    : async () => {}
  const completedInDb = async () => Number((await db.executeSql("SELECT count(*) AS n FROM pgboss.job WHERE name = $1 AND state = 'completed'", [o.queue])).rows[0].n)

  let completed = 0
  let lastCompletion = 0
  let stop = false
  const loops = []
  if (o.mode === 'loop') {
    for (let w = 0; w < o.workers; w++) {
      loops.push((async () => {
        while (!stop) {
          const jobs = await boss.fetch(o.queue, { batchSize: o.batchSize })
          if (!jobs || jobs.length === 0) { await sleep(5); continue }
          await insertRows(jobs.map(j => j.id))
          await boss.complete(o.queue, jobs.map(j => j.id))
          completed += jobs.length
          lastCompletion = now()
          if (completed >= o.jobs) stop = true
        }
      })())
    }
  } else {
    for (let w = 0; w < o.workers; w++) {
      await boss.work(o.queue, { batchSize: o.batchSize, pollingIntervalSeconds: 0.5 }, async () => {})
    }
  }
  await sleep(200) // the workers are polling

  const jobs = Array.from({ length: o.jobs }, (_, i) => ({ name: o.queue, data: { i } }))
  const t0 = now()
  await boss.insert(jobs)
  const t1 = now()

  if (o.mode === 'loop') {
    const deadline = t1 + 600
    while (!stop && now() < deadline) await sleep(20)
    stop = true
    await Promise.all(loops)
  } else {
    const deadline = t1 + 600
    while (now() < deadline) {
      const n = await completedInDb()
      if (n >= o.jobs) { lastCompletion = now(); break }
      await sleep(20)
    }
    await boss.offWork(o.queue)
  }
  const inDb = await completedInDb()
  const e2e = lastCompletion - t0
  const proc = lastCompletion - t1
  const rows = o.work === 'insert'
    ? Number((await db.executeSql('SELECT count(*) AS n FROM bench_ledger WHERE queue = $1', [o.queue])).rows[0].n)
    : 0
  console.log(`PGBOSS mode=${o.mode} work=${o.work} rows=${rows} jobs=${o.jobs} workers=${o.workers} batch_size=${o.batchSize} ` +
    `insert_seconds=${(t1 - t0).toFixed(3)} e2e_seconds=${e2e.toFixed(3)} process_seconds=${proc.toFixed(3)} ` +
    `jobs_per_s=${(o.jobs / e2e).toFixed(0)} process_jobs_per_s=${(o.jobs / proc).toFixed(0)} completed=${inDb}`)
  await boss.deleteQueue(o.queue).catch(() => {})
  await boss.stop({ graceful: false, wait: true })
  if (o.work === 'insert' && rows !== o.jobs) {
    console.error(`pgboss bench: ${rows} ledger rows for ${o.jobs} jobs`)
    process.exitCode = 1
  }
  if (inDb !== o.jobs) {
    console.error(`pgboss bench: ${inDb} of ${o.jobs} jobs completed`)
    process.exitCode = 1
  }
}

main().catch(err => { console.error('pgboss bench:', err.stack || err.message); process.exit(1) })
