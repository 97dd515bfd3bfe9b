/**
 * bench/hop-rows.ts's tables (issue #36): the ratio lines readers and the README transcribe,
 * and beside each target the floor measured in the same run (servers that decide nothing).
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import {
  askedServer,
  decisionResponders,
  hopFloorLines,
  hopRatioLines,
  neededServers,
  removeDecisionSockets,
  serversToStart,
} from '../../bench/hop-rows.ts'

const HOPS = 'hops: PAT through each proxy'
const row = (server: string, ...repeats: number[]) => ({
  case: HOPS,
  server,
  rps: repeats.toSorted((a, b) => a - b)[Math.floor(repeats.length / 2)] ?? 0,
  repeats,
})

const RUN = [
  row('undici proxy', 10_000, 10_000, 10_000),
  row('undici proxy + identity headers', 9000, 9000, 9000),
  row('tokengate-gateway', 7000, 7200, 7400),
  row('nginx', 20_000, 20_000, 20_000),
  row('nginx + decision (unix)', 10_000, 10_200, 10_400),
  row('nginx + node:http decision floor (unix)', 10_600, 10_600, 10_600),
  row('nginx + net decision floor (unix)', 11_600, 11_600, 11_600),
  row('nginx + decision (lua cached)', 16_600, 16_600, 16_600),
  row('nginx + subrequest floor + identity', 17_200, 17_200, 17_200),
  // Another case's row of the same server is not a hop.
  { case: 'gateway: proxied (PAT) vs direct upstream', server: 'nginx', rps: 1, repeats: [1] },
]

test('the ratio lines stay as readers know them, with the floors as ratios without a target', () => {
  const lines = hopRatioLines(RUN)
  assert.deepEqual(lines.slice(0, 4), [
    '| hop (PAT, all on CPU 0) | ratio (medians) | per repeat | target | met |',
    '|---|---:|---|---:|:-:|',
    '| gateway PAT / bare undici proxy | 0.72 | 0.70 0.72 0.74 | 0.85 | **no** |',
    '| undici proxy + identity headers / bare undici proxy | 0.90 | 0.90 0.90 0.90 | — |  |',
  ])
  assert.ok(
    lines.includes(
      '| nginx + decision (unix) / nginx alone | 0.51 | 0.50 0.51 0.52 | 0.6 | **no** |',
    ),
  )
  assert.ok(
    lines.includes(
      '| nginx + net decision floor (unix) / nginx alone | 0.58 | 0.58 0.58 0.58 | — |  |',
    ),
  )
})

test('each target is printed with the floors that bound it, measured in the same run', () => {
  assert.deepEqual(hopFloorLines(RUN), [
    '| hop (PAT, all on CPU 0; medians) | target | tokengate | floor: the same hop doing nothing | floor | tokengate / floor (per repeat) | target ≤ floor (repeats) |',
    '|---|---:|---:|---|---:|---|:-:|',
    '| gateway PAT / bare undici proxy | 0.85 | 0.72 | undici proxy + identity headers | 0.90 | 0.80 (0.78 0.80 0.82) | yes (3 of 3) |',
    '| nginx + decision (unix) / nginx alone | 0.6 | 0.51 | nginx + node:http decision floor (unix) | 0.53 | 0.96 (0.94 0.96 0.98) | **no** (0 of 3) |',
    '| nginx + decision (unix) / nginx alone | 0.6 | 0.51 | nginx + net decision floor (unix) | 0.58 | 0.88 (0.86 0.88 0.90) | **no** (0 of 3) |',
    '| nginx + decision (lua cached) / nginx alone | 0.9 | 0.83 | nginx + subrequest floor + identity | 0.86 | 0.97 (0.97 0.97 0.97) | **no** (0 of 3) |',
  ])
})

test('hopRatioLines prints the floor table after the ratio table', () => {
  const lines = hopRatioLines(RUN)
  const gap = lines.indexOf('')
  assert.ok(gap > 0)
  assert.deepEqual(lines.slice(gap + 1), hopFloorLines(RUN))
})

test('a target is listed only with its tokengate row, a floor only once measured', () => {
  // The TCP floors without `nginx + decision`, the unix row without its floors: nothing.
  assert.deepEqual(
    hopFloorLines([
      row('nginx', 20_000),
      row('nginx + node:http decision floor', 12_400),
      row('nginx + decision (unix)', 10_000),
    ]),
    [],
  )
  // A floor at or above the target: the target is within reach.
  assert.deepEqual(
    hopFloorLines([
      row('nginx', 20_000),
      row('nginx + decision', 9000),
      row('nginx + node:http decision floor', 12_400),
    ]).slice(2),
    [
      '| nginx + decision / nginx alone | 0.6 | 0.45 | nginx + node:http decision floor | 0.62 | 0.73 (0.73) | yes (1 of 1) |',
    ],
  )
})

test('a run without floors (or without their baseline) prints no floor table', () => {
  const floorless = RUN.filter(
    (r) => !r.server.includes('floor') && r.server !== 'undici proxy + identity headers',
  )
  assert.deepEqual(hopFloorLines(floorless), [])
  assert.ok(!hopRatioLines(floorless).includes(''))
  assert.deepEqual(
    hopFloorLines(RUN.filter((r) => r.server !== 'nginx' && r.server !== 'undici proxy')),
    [],
  )
})

test('each floor row asks its own do-nothing responder, over the transport of the row it bounds', () => {
  assert.equal(askedServer('nginx + decision'), 'tokengate-gateway')
  assert.equal(askedServer('nginx + decision (unix)'), 'tokengate-decision-socket')
  assert.equal(askedServer('nginx + node:http decision floor'), 'decision floor: node:http')
  assert.equal(askedServer('nginx + net decision floor (unix)'), 'decision floor: net (unix)')
  // nginx answers the subrequest itself.
  assert.equal(askedServer('nginx + subrequest floor + identity'), undefined)
  assert.equal(askedServer('undici proxy'), undefined)
})

test('only the responders the chosen rows ask are started, the unix ones on a socket of their own', () => {
  assert.deepEqual(
    decisionResponders(['nginx', 'nginx + decision', 'nginx + net decision floor']),
    [{ id: 'decision floor: net', argv: ['bench/servers/decision-floor.ts', 'net'] }],
  )
  const [unix, ...rest] = decisionResponders(['nginx + node:http decision floor (unix)'])
  assert.deepEqual(rest, [])
  assert.equal(unix?.id, 'decision floor: node:http (unix)')
  assert.match(unix?.listen ?? '', /^unix:\/.*\/decision-floor-node-http-unix\.sock$/)
  removeDecisionSockets()
})

test('a proxy needs the upstream; an nginx row needs the decider it asks too', () => {
  assert.deepEqual(neededServers('nginx'), ['upstream', 'tokengate-gateway'])
  assert.deepEqual(neededServers('nginx + decision (unix, cached)'), [
    'upstream',
    'tokengate-decision-socket',
  ])
  assert.deepEqual(neededServers('nginx + net decision floor'), ['upstream', 'decision floor: net'])
  assert.deepEqual(neededServers('nginx + subrequest floor + identity'), ['upstream'])
  assert.deepEqual(neededServers('tokengate-gateway'), ['upstream'])
  assert.deepEqual(neededServers('undici proxy + identity headers'), ['upstream'])
  assert.deepEqual(neededServers('tokengate'), [])
  assert.deepEqual(neededServers('upstream'), [])
})

/** bench/run.ts's servers in the order it defines them (upstream and deciders before nginx). */
const DEFINED = [
  'upstream',
  'tokengate',
  'tokengate-gateway',
  'fastify-noauth',
  'undici proxy',
  'undici proxy + identity headers',
  'tokengate-decision-socket',
  'decision floor: node:http',
  'decision floor: net',
  'decision floor: node:http (unix)',
  'decision floor: net (unix)',
  'nginx',
  'nginx + decision',
  'nginx + decision (unix)',
  'nginx + node:http decision floor',
  'nginx + net decision floor (unix)',
  'nginx + subrequest floor + identity',
].map((id) => ({ id }))
const startedFor = (servers: RegExp) =>
  serversToStart(
    DEFINED,
    DEFINED.filter((s) => servers.test(s.id)),
  ).map((s) => s.id)

test('a selection starts every server its rows need, in the order they are defined', () => {
  // The trap of earlier sessions: nginx rows named without the tokengate servers they ask.
  assert.deepEqual(startedFor(/^(upstream|nginx.*)$/), [
    'upstream',
    'tokengate-gateway',
    'tokengate-decision-socket',
    'decision floor: node:http',
    'decision floor: net (unix)',
    'nginx',
    'nginx + decision',
    'nginx + decision (unix)',
    'nginx + node:http decision floor',
    'nginx + net decision floor (unix)',
    'nginx + subrequest floor + identity',
  ])
  // Without the upstream named either, and through the gateway.
  assert.deepEqual(startedFor(/^nginx \+ decision$/), [
    'upstream',
    'tokengate-gateway',
    'nginx + decision',
  ])
  assert.deepEqual(startedFor(/^undici proxy$/), ['upstream', 'undici proxy'])
  // What needs nothing starts alone; nothing chosen, nothing started.
  assert.deepEqual(startedFor(/^tokengate$/), ['tokengate'])
  assert.deepEqual(startedFor(/^none$/), [])
  assert.deepEqual(
    startedFor(/./),
    DEFINED.map((s) => s.id),
  )
})

test('a floor that reaches the target in some rounds only says in how many', () => {
  const lines = hopFloorLines([
    row('nginx', 20_000, 20_000, 20_000),
    row('nginx + decision', 9000, 9000, 9000),
    row('nginx + node:http decision floor', 11_000, 11_600, 12_400),
  ])
  assert.deepEqual(lines.slice(2), [
    '| nginx + decision / nginx alone | 0.6 | 0.45 | nginx + node:http decision floor | 0.58 | 0.78 (0.82 0.78 0.73) | **no** (1 of 3) |',
  ])
})
