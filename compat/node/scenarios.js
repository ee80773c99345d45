// Compatibility scenarios for kafkajs (non-flexible protocol versions only).
//
//   node scenarios.js list
//   node scenarios.js BOOTSTRAP [SCENARIO...]
//
// Prints one line per scenario: SCENARIO kafkajs NAME PASS|FAIL|SKIP detail
'use strict'
const { execFileSync } = require('child_process')
const { Kafka, logLevel, CompressionTypes, ConfigResourceTypes } = require('kafkajs')

const CLIENT = 'kafkajs'
const RUN = (Date.now() % 1e9).toString(36) + Math.floor(Math.random() * 1e6).toString(36)
let bootstrap

function check (cond, what) { if (!cond) throw new Error(what) }
// Thrown by a scenario that cannot run here; reported as SKIP, not counted as a failure.
class Skip extends Error {}
const topicName = s => `compat-kafkajs-${s}-${RUN}`
const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

// read() until ok(result), for at most 10 s: Apache Kafka's brokers apply a change the
// controller has committed (configs, partitions) to their metadata shortly after the admin
// request is answered, so a describe right after a change may still see the old state.
async function settled (read, ok, what) {
  const deadline = Date.now() + 10000
  for (;;) {
    const got = await read()
    if (ok(got)) return got
    check(Date.now() < deadline, `${what}: ${JSON.stringify(got).slice(0, 400)}`)
    await sleep(200)
  }
}

function kafka (overrides = {}) {
  return new Kafka({ clientId: 'compat-kafkajs', brokers: bootstrap.split(','), logLevel: logLevel.NOTHING, requestTimeout: 15000, retry: { retries: 3 }, ...overrides })
}

function makeRecords (partitions, n) {
  const base = Date.now() - 3600000
  const recs = []
  for (let i = 0; i < n; i++) {
    const key = i % 7 === 3 ? null : `key-${i}`
    const value = (i % 11 === 5 && key !== null) ? null : `value-${i}-${'x'.repeat(i % 13)}-ünïcødé`
    const headers = i % 4 !== 0 ? { 'h-index': String(i), 'h-empty': '' } : undefined
    recs.push({ partition: i % partitions, key, value, headers, timestamp: String(base + i * 1000) })
  }
  return recs
}

async function createTopic (admin, topic, numPartitions, configEntries, replicationFactor = 1) {
  const created = await admin.createTopics({ topics: [{ topic, numPartitions, replicationFactor, configEntries }], waitForLeaders: true, timeout: 15000 })
  check(created === true, `createTopics returned ${created}`)
  const deadline = Date.now() + 15000
  for (;;) {
    try {
      const md = await admin.fetchTopicMetadata({ topics: [topic] })
      if (md.topics[0].partitions.length === numPartitions && md.topics[0].partitions.every(p => p.leader >= 0)) return
    } catch (e) { /* not yet */ }
    check(Date.now() < deadline, `topic ${topic} not ready`)
    await sleep(200)
  }
}

// Produce partition by partition (one send per partition) so that each record's offset is baseOffset + index.
async function produce (producer, topic, recs, compression) {
  const byPart = new Map()
  recs.forEach(r => { if (!byPart.has(r.partition)) byPart.set(r.partition, []); byPart.get(r.partition).push(r) })
  for (const [p, list] of byPart) {
    const res = await producer.send({ topic, acks: -1, compression, messages: list.map(r => ({ partition: p, key: r.key, value: r.value, headers: r.headers, timestamp: r.timestamp })) })
    check(res.length === 1 && res[0].partition === p && res[0].errorCode === 0, `produce result ${JSON.stringify(res)}`)
    const base = Number(res[0].baseOffset)
    check(base === 0 || list[0].offset === undefined, 'unexpected base offset')
    list.forEach((r, i) => { r.offset = base + i })
  }
  const next = new Map()
  for (const r of recs.slice().sort((a, b) => a.partition - b.partition || a.offset - b.offset)) {
    const exp = next.get(r.partition) || 0
    check(r.offset === exp, `partition ${r.partition}: acked offset ${r.offset}, expected ${exp}`)
    next.set(r.partition, exp + 1)
  }
  return recs
}

const str = b => (b === null || b === undefined ? null : b.toString())
const hdr = h => JSON.stringify(Object.entries(h || {}).map(([k, v]) => [k, str(v)]).sort())

function verify (want, got) {
  check(got.length === want.length, `read back ${got.length} records, produced ${want.length}`)
  const byPos = new Map(want.map(w => [`${w.partition}@${w.offset}`, w]))
  const last = new Map()
  want.forEach(w => last.set(w.partition, Math.min(last.has(w.partition) ? last.get(w.partition) : Infinity, w.offset - 1)))
  for (const r of got) {
    const at = `at ${r.partition}@${r.offset}`
    check(r.offset === last.get(r.partition) + 1, `partition ${r.partition}: offset ${r.offset} after ${last.get(r.partition)}`)
    last.set(r.partition, r.offset)
    const w = byPos.get(`${r.partition}@${r.offset}`)
    check(w, `unexpected record ${at}`)
    check(str(r.key) === w.key, `key ${str(r.key)} != ${w.key} ${at}`)
    check(str(r.value) === w.value, `value ${str(r.value)} != ${w.value} ${at}`)
    check(r.timestamp === w.timestamp, `timestamp ${r.timestamp} != ${w.timestamp} ${at}`)
    check(hdr(r.headers) === hdr(w.headers), `headers ${hdr(r.headers)} != ${hdr(w.headers)} ${at}`)
  }
}

// Read partitions from offset 0 without a consumer group: kafkajs's consumer always joins a group,
// so use its own cluster/broker layer (same protocol code: Metadata + Fetch v11 + record batch decoding).
async function readAll (k, topic, partitions, n, timeoutMs = 20000) {
  const sym = Object.getOwnPropertySymbols(k).find(s => s.description === 'private:Kafka:createCluster')
  const cluster = k[sym]({ allowAutoTopicCreation: false })
  await cluster.connect()
  try {
    await cluster.addTargetTopic(topic)
    await cluster.refreshMetadata()
    const got = []
    const next = new Map([...Array(partitions).keys()].map(p => [p, 0]))
    const deadline = Date.now() + timeoutMs
    while (got.length < n && Date.now() < deadline) {
      const leaders = cluster.findLeaderForPartitions(topic, [...next.keys()])
      for (const nodeId of Object.keys(leaders)) {
        const broker = await cluster.findBroker({ nodeId })
        const resp = await broker.fetch({
          replicaId: -1, isolationLevel: 1, maxWaitTime: 200, minBytes: 1, maxBytes: 10485760,
          topics: [{ topic, partitions: leaders[nodeId].map(p => ({ partition: p, fetchOffset: String(next.get(p)), maxBytes: 1048576 })) }]
        })
        for (const t of resp.responses) {
          for (const p of t.partitions) {
            check(p.errorCode === 0, `fetch ${topic}[${p.partition}] error ${p.errorCode}`)
            for (const m of p.messages) {
              if (Number(m.offset) < next.get(p.partition)) continue
              got.push({ partition: p.partition, offset: Number(m.offset), key: m.key, value: m.value, headers: m.headers, timestamp: m.timestamp })
              next.set(p.partition, Number(m.offset) + 1)
            }
          }
        }
      }
    }
    return got.sort((a, b) => a.partition - b.partition || a.offset - b.offset)
  } finally {
    await cluster.disconnect()
  }
}

async function produceFetch () {
  const k = kafka()
  const t = topicName('pf')
  const admin = k.admin()
  await admin.connect()
  const producer = k.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false })
  try {
    await createTopic(admin, t, 3)
    await producer.connect()
    const want = await produce(producer, t, makeRecords(3, 60))
    verify(want, await readAll(k, t, 3, want.length))
    const offs = await admin.fetchTopicOffsets(t)
    check(offs.length === 3 && offs.every(o => o.high === '20' && o.low === '0'), `fetchTopicOffsets ${JSON.stringify(offs)}`)
    return `${want.length} records, 3 partitions, idempotent acks=all, keys/headers/timestamps/offsets verified (Produce v7, Fetch v11)`
  } finally {
    await producer.disconnect(); await admin.disconnect()
  }
}

async function compression () {
  const k = kafka()
  const t = topicName('comp')
  const admin = k.admin()
  await admin.connect()
  const producer = k.producer({ allowAutoTopicCreation: false })
  try {
    await createTopic(admin, t, 2)
    await producer.connect()
    const want = []
    const codecs = [['none', CompressionTypes.None], ['gzip', CompressionTypes.GZIP]]
    for (let i = 0; i < codecs.length; i++) {
      const recs = makeRecords(1, 40)
      recs.forEach(r => { r.partition = i })
      want.push(...await produce(producer, t, recs, codecs[i][1]))
    }
    verify(want, await readAll(k, t, 2, want.length))
    return `none,gzip (built-in codecs): ${want.length} records verified`
  } finally {
    await producer.disconnect(); await admin.disconnect()
  }
}

async function consumerGroup () {
  const k = kafka()
  const t = topicName('grp')
  const groupId = `compat-kafkajs-group-${RUN}`
  const admin = k.admin()
  await admin.connect()
  const producer = k.producer({ allowAutoTopicCreation: false })
  const consumer = k.consumer({ groupId, sessionTimeout: 10000, heartbeatInterval: 1000, retry: { retries: 8 } })
  try {
    await createTopic(admin, t, 2)
    await producer.connect()
    const want = await produce(producer, t, makeRecords(2, 30))
    await consumer.connect()
    await consumer.subscribe({ topics: [t], fromBeginning: true })
    const got = []
    let crashed = null
    consumer.on(consumer.events.CRASH, e => { crashed = e.payload.error })
    await consumer.run({
      autoCommit: true,
      eachMessage: async ({ partition, message }) => {
        got.push({ partition, offset: Number(message.offset), key: message.key, value: message.value, headers: message.headers, timestamp: message.timestamp })
      }
    })
    const deadline = Date.now() + 25000
    while (got.length < want.length && Date.now() < deadline && !crashed) await sleep(100)
    if (crashed) throw crashed
    got.sort((a, b) => a.partition - b.partition || a.offset - b.offset)
    verify(want, got)
    await consumer.commitOffsets([0, 1].map(p => ({ topic: t, partition: p, offset: '15' })))
    await consumer.disconnect()
    const offs = await admin.fetchOffsets({ groupId, topics: [t] })
    check(offs[0].partitions.every(p => p.offset === '15'), `fetchOffsets ${JSON.stringify(offs)}`)
    const groups = await admin.listGroups()
    check(groups.groups.some(g => g.groupId === groupId), 'group not listed')
    await admin.deleteGroups([groupId])
    return 'subscribe fromBeginning + run + commitOffsets + fetchOffsets + listGroups + deleteGroups'
  } finally {
    await consumer.disconnect().catch(() => {}); await producer.disconnect(); await admin.disconnect()
  }
}

async function adminOps () {
  const k = kafka()
  const t = topicName('adm')
  const admin = k.admin()
  await admin.connect()
  const producer = k.producer({ allowAutoTopicCreation: false })
  try {
    await createTopic(admin, t, 2, [{ name: 'retention.ms', value: '3600000' }])
    check(await admin.createTopics({ topics: [{ topic: t, numPartitions: 1 }] }) === false, 'createTopics on an existing topic returned true')
    check((await admin.listTopics()).includes(t), 'listTopics lacks topic')
    const cfg = async () => {
      const d = await admin.describeConfigs({ resources: [{ type: ConfigResourceTypes.TOPIC, name: t }], includeSynonyms: false })
      return Object.fromEntries(d.resources[0].configEntries.map(e => [e.configName, e.configValue]))
    }
    check((await cfg())['retention.ms'] === '3600000', 'retention.ms not 3600000')
    await admin.alterConfigs({ validateOnly: false, resources: [{ type: ConfigResourceTypes.TOPIC, name: t, configEntries: [{ name: 'retention.ms', value: '7200000' }] }] })
    await settled(cfg, c => c['retention.ms'] === '7200000', 'retention.ms not 7200000 after alterConfigs')
    const cl = await admin.describeCluster()
    // One broker per bootstrap address (the runner lists every node of a cluster).
    check(cl.brokers.length === bootstrap.split(',').length && cl.clusterId, `describeCluster ${JSON.stringify(cl)}`)
    await admin.createPartitions({ topicPartitions: [{ topic: t, count: 3 }] })
    await settled(async () => (await admin.fetchTopicMetadata({ topics: [t] })).topics[0].partitions.length, n => n === 3,
      'partitions after createPartitions')
    await producer.connect()
    const recs = await produce(producer, t, makeRecords(1, 10))
    const byTs = await admin.fetchTopicOffsetsByTimestamp(t, Number(recs[5].timestamp))
    const p0 = byTs.find(o => o.partition === 0)
    check(p0 && p0.offset === '5', `fetchTopicOffsetsByTimestamp(#5) -> ${JSON.stringify(byTs)}`)
    await admin.deleteTopicRecords({ topic: t, partitions: [{ partition: 0, offset: '4' }] })
    const offs = await admin.fetchTopicOffsets(t)
    const o0 = offs.find(o => o.partition === 0)
    check(o0.low === '4' && o0.high === '10', `fetchTopicOffsets after deleteTopicRecords ${JSON.stringify(o0)}`)
    await admin.deleteTopics({ topics: [t], timeout: 15000 })
    const deadline = Date.now() + 15000
    while ((await admin.listTopics()).includes(t)) { check(Date.now() < deadline, 'topic still listed after delete'); await sleep(200) }
    return 'createTopics(+exists) listTopics fetchTopicMetadata describeConfigs alterConfigs describeCluster createPartitions fetchTopicOffsets(ByTimestamp) deleteTopicRecords deleteTopics'
  } finally {
    await producer.disconnect(); await admin.disconnect()
  }
}

// Kill -9 the leader of a replicated partition while an idempotent producer is producing: the producer
// rides through on its own retries, every acked record is there exactly once, a new leader serves.
// compat/run.sh runs it alone, after all the others, on a cluster (COMPAT_NODE_CTL); elsewhere it SKIPs.
async function leaderFailover () {
  const ctl = process.env.COMPAT_NODE_CTL
  if (!ctl) throw new Skip('needs a cluster (compat/run.sh --nodes 3)')
  const nodeCtl = (cmd, node) => {
    try {
      execFileSync(ctl, [cmd, String(node)], { stdio: ['ignore', 'ignore', 'inherit'], timeout: 90000 })
    } catch (e) {
      throw new Error(`$COMPAT_NODE_CTL ${cmd} ${node} failed (${e.status !== null && e.status !== undefined ? 'exit ' + e.status : e.signal || e.message})`)
    }
  }
  // Enough retries, backing off to 5 s, to outlast the leader's absence (broker session timeout + election).
  const retry = { retries: 20, initialRetryTime: 300, maxRetryTime: 5000 }
  const k = kafka({ requestTimeout: 30000, retry })
  const t = topicName('failover')
  const admin = k.admin()
  await admin.connect()
  const producer = k.producer({ idempotent: true, maxInFlightRequests: 1, allowAutoTopicCreation: false, retry })
  const partition0 = async () => {
    const md = await admin.fetchTopicMetadata({ topics: [t] })
    return md.topics[0].partitions.find(p => p.partitionId === 0)
  }
  try {
    await createTopic(admin, t, 1, [{ name: 'min.insync.replicas', value: '2' }], 3)
    const deadline = Date.now() + 30000
    for (;;) {
      const p = await partition0().catch(() => null)
      if (p && p.leader >= 0 && p.isr.length === 3) break
      check(Date.now() < deadline, `partition 0 has no leader and ISR of 3 after 30 s: ${JSON.stringify(p)}`)
      await sleep(200)
    }
    await producer.connect()
    const acked = []
    const before = await producer.send({ topic: t, acks: -1, messages: [...Array(20).keys()].map(i => ({ partition: 0, key: `before-${i}`, value: `value-before-${i}` })) })
    check(before.length === 1 && before[0].partition === 0 && before[0].errorCode === 0 && Number(before[0].baseOffset) === 0,
      `produce before the kill: ${JSON.stringify(before)}`)
    for (let i = 0; i < 20; i++) acked.push({ partition: 0, offset: i, key: `before-${i}` })
    const killed = (await partition0()).leader
    let error = null
    let killedAt, firstAfter, newLeader, got
    try {
      nodeCtl('kill9', killed)
      killedAt = Date.now()
      for (let i = 0; i < 20; i++) {
        const res = await producer.send({ topic: t, acks: -1, messages: [{ partition: 0, key: `after-${i}`, value: `value-after-${i}` }] })
        check(res.length === 1 && res[0].partition === 0 && res[0].errorCode === 0, `produce after-${i}: ${JSON.stringify(res)}`)
        check(Number(res[0].baseOffset) === 20 + i, `after-${i} acked at offset ${res[0].baseOffset}, expected ${20 + i}`)
        if (i === 0) firstAfter = (Date.now() - killedAt) / 1000
        acked.push({ partition: 0, offset: 20 + i, key: `after-${i}` })
      }
      got = await readAll(kafka({ requestTimeout: 30000, retry }), t, 1, 40, 30000)
      check(got.length === 40, `read back ${got.length} records, acked 40`)
      got.forEach((r, i) => {
        check(r.offset === i, `record ${i} read at offset ${r.offset}`)
        check(str(r.key) === acked[i].key, `offset ${i}: key ${str(r.key)}, acked ${acked[i].key}`)
      })
      const offs = await admin.fetchTopicOffsets(t)
      check(offs.length === 1 && offs[0].high === '40' && offs[0].low === '0', `fetchTopicOffsets after the failover ${JSON.stringify(offs)}`)
      newLeader = (await partition0()).leader
      check(newLeader >= 0 && newLeader !== killed, `partition 0's leader after the kill is ${newLeader}, the killed node was ${killed}`)
    } catch (e) {
      error = e
    } finally {
      try { nodeCtl('start', killed) } catch (e) {
        if (!error) error = e
        else error.message += `; then ${e.message}`
      }
    }
    if (error) throw error
    return `leader ${killed} killed (-9): 20 records acked before and 20 after on new leader ${newLeader} (first after ${firstAfter.toFixed(1)} s), 40 read back at offsets 0-39`
  } finally {
    await producer.disconnect().catch(() => {}); await admin.disconnect().catch(() => {})
  }
}

const SCENARIOS = { 'produce-fetch': produceFetch, compression, 'consumer-group': consumerGroup, admin: adminOps, 'leader-failover': leaderFailover }

async function main () {
  const args = process.argv.slice(2)
  if (args.length === 0) { console.error('usage: node scenarios.js list | node scenarios.js BOOTSTRAP [SCENARIO...]'); process.exit(2) }
  if (args[0] === 'list') { Object.keys(SCENARIOS).forEach(n => console.log(n)); return }
  bootstrap = args[0]
  const names = args.length > 1 ? args.slice(1) : Object.keys(SCENARIOS)
  let failed = 0
  for (const n of names) {
    let line
    try {
      if (!SCENARIOS[n]) throw new Error('unknown scenario')
      line = 'PASS ' + await SCENARIOS[n]()
    } catch (e) {
      if (e instanceof Skip) { console.log(`SCENARIO ${CLIENT} ${n} SKIP ${e.message}`); continue }
      failed++
      line = `FAIL ${e.name || 'Error'}: ${String(e.message).replace(/\n/g, ' ')}`
    }
    console.log(`SCENARIO ${CLIENT} ${n} ${line}`)
  }
  process.exit(failed ? 1 : 0)
}
main()
