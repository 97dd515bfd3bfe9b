/**
 * The tail-latency diagnosis (bench/latency-stalls.ts) rests on three things: the stall probe
 * (bench/latency-probe.ts) telling a loop that ran from one that was blocked, the paced
 * generator's trace holding the same latencies it reports, the episode labels, and a run's CPU
 * share told apart (bench/latency-machine.ts). Bounds only, no timing targets.
 */
import assert from 'node:assert/strict'
import { execFile, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { after, test } from 'node:test'
import {
  cpuList,
  markCpu,
  primeUntilQuiet,
  settle,
  shareSince,
} from '../../bench/latency-machine.ts'
import { causeOf } from '../../bench/latency-stalls.ts'
import { CAN_PIN } from '../../bench/processes.ts'

const dir = mkdtempSync(join(tmpdir(), 'tg-stalls-test-'))
after(() => rmSync(dir, { recursive: true, force: true }))
const bench = (file: string) => new URL(`../../bench/${file}`, import.meta.url).pathname

/** `node argv`, or `command` (an argv list) when given. */
function run(
  argv: string[],
  env: Record<string, string> = {},
  command: string[] = [process.execPath, ...argv],
): Promise<string> {
  const [program, ...args] = command as [string, ...string[]]
  return new Promise((resolve, reject) =>
    execFile(
      program,
      args,
      { env: { ...process.env, ...env }, timeout: 30_000 },
      (error, stdout, stderr) =>
        error ? reject(new Error(stderr || String(error))) : resolve(stdout),
    ),
  )
}

test('the probe logs a busy loop as run, a blocked one as neither run nor waited, and GCs', async () => {
  const log = join(dir, 'probe.jsonl')
  // 80 ms spinning, then 80 ms blocked in Atomics.wait, then a full GC.
  const script = `
    setTimeout(() => {
      const until = performance.now() + 80
      while (performance.now() < until);
      setTimeout(() => {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 80)
        setTimeout(() => { globalThis.gc(); setTimeout(() => {}, 30) }, 30)
      }, 30)
    }, 50)`
  await run(['--expose-gc', `--import=${bench('latency-probe.ts')}`, '-e', script], {
    TG_STALL_LOG: log,
  })
  const lines = readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
  const stalls = lines.filter((l) => 'stall' in l && l.gap >= 70)
  assert.equal(stalls.length, 2, JSON.stringify(lines))
  const [busy, blocked] = stalls
  // Spinning, the thread wanted the CPU the whole time: it ran or waited for a CPU.
  assert.ok(busy.run + busy.wait >= 0.8 * busy.gap, JSON.stringify(busy))
  // Blocked, it wanted no CPU: a gap that neither ran nor waited.
  assert.ok(blocked.run + blocked.wait <= 0.3 * blocked.gap, JSON.stringify(blocked))
  assert.ok(blocked.stall > busy.stall)
  assert.ok(
    lines.some((l) => 'gc' in l && l.gc > blocked.stall),
    'the forced GC is logged after the blocked gap',
  )
})

test('without TG_STALL_LOG the probe does nothing', async () => {
  const out = await run([`--import=${bench('latency-probe.ts')}`, '-e', 'console.log("ran")'])
  assert.equal(out, 'ran\n')
})

test("the generator's trace holds every request and the latencies it reports", async () => {
  let seen = 0
  const server = createServer((_req, res) => {
    // The 40th request (0.2 s in at 200/s) blocks the server for 150 ms.
    if (++seen === 40) {
      const until = performance.now() + 150
      while (performance.now() < until);
    }
    res.end('ok')
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  after(() => server.close())
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  const [out, trace] = [join(dir, 'latencies.f64'), join(dir, 'run.trace')]
  const argv = [bench('paced-load.ts'), '--url', url, '--rate', '200', '--duration', '1']
  await run([...argv, '--warmup', '0', '--connections', '4', '--out', out, '--trace', trace])
  const f64 = (file: string) => {
    const bytes = readFileSync(file)
    return new Float64Array(bytes.buffer, bytes.byteOffset, bytes.length / 8).slice()
  }
  const rows = f64(trace)
  assert.equal(rows.length, 200 * 5)
  const latencies: number[] = []
  for (let i = 0; i < 200; i++) {
    const [due, taken, sent, done, status] = [...rows.subarray(i * 5, i * 5 + 5)] as [
      number,
      number,
      number,
      number,
      number,
    ]
    assert.equal(status, 200)
    if (i > 0) assert.ok(Math.abs(due - (rows[(i - 1) * 5] as number) - 5) < 1e-6)
    assert.ok(taken <= sent && sent <= done, `request ${i}: ${[due, taken, sent, done]}`)
    latencies.push(done - Math.min(due, sent))
  }
  assert.deepEqual(
    latencies.sort((a, b) => a - b),
    [...f64(out)].sort((a, b) => a - b),
  )
  // The stall is visible in the trace: requests due during it answered ≥ 50 ms after due.
  assert.ok(latencies.filter((ms) => ms >= 50).length >= 10)
})

test('episodes are labelled by what overlapped them', () => {
  const gap = (stall: number, length: number, run: number, wait: number) => ({
    stall,
    gap: length,
    run,
    wait,
    proc: run,
  })
  assert.equal(causeOf(0.8, [gap(0, 10, 0, 9)], 0), 'generator')
  // Two of the path's processes waited for a CPU at the same moment: CPU 0 ran something else.
  assert.equal(causeOf(0, [gap(0, 10, 0.5, 9), gap(2, 10, 0.2, 9.5)], 0), 'CPU 0 held')
  // Waiting, but not at the same moment: one waited for the other (our own queue).
  assert.equal(causeOf(0, [gap(0, 10, 0.5, 9), gap(20, 10, 0.2, 9.5)], 0), 'path busy')
  assert.equal(causeOf(0, [gap(0, 4, 3, 1)], 2.5), 'GC')
  assert.equal(causeOf(0, [gap(0, 4, 3, 1)], 0), 'path busy')
  assert.equal(causeOf(0, [], 0), 'unlogged')
})

test("a run's CPU share: the bench's pinned processes apart from everything else", {
  skip: CAN_PIN && existsSync('/proc/stat') ? false : 'needs taskset, 2 CPUs and /proc',
}, async () => {
  // Spins until it has used 300 ms of CPU (however busy CPU 0 is), writes `done`, then
  // sleeps: alive, so counted, when the share is read.
  const done = join(dir, 'spun')
  const spin = `const { cpuUsage } = process; while (cpuUsage().user + cpuUsage().system < 300000); require('fs').writeFileSync(process.argv[1], String(process.pid)); Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 5000)`
  const spun = async () => {
    while (!existsSync(done)) await new Promise((resolve) => setTimeout(resolve, 20))
    const pid = Number(readFileSync(done, 'utf8'))
    rmSync(done)
    return pid
  }
  /**
   * CPU-seconds × 100 (percent × seconds) since `mark`; every other process named, not only
   * the 4 busiest (on a loaded machine others used more than the 300 ms spun here).
   */
  const used = (mark: ReturnType<typeof markCpu>) => {
    const share = shareSince(mark, Number.POSITIVE_INFINITY)
    const seconds = (Date.now() - mark.at) / 1000
    const named = (pid: number) => {
      const p = share.busiest.find((b) => b.pid === pid)
      return p && { pinned: p.pinned, used: p.percent * seconds }
    }
    return { ours: share.ours * seconds, others: share.others * seconds, named }
  }
  // Ours: a child of this process pinned to CPU 0.
  let mark = markCpu(0)
  const child = spawn('taskset', ['-c', '0', process.execPath, '-e', spin, done], {
    stdio: 'ignore',
  })
  after(() => child.kill())
  assert.equal(await spun(), child.pid)
  const ours = used(mark)
  child.kill()
  // Someone else's: the same, detached by a shell that exits at once (re-parented away).
  mark = markCpu(0)
  await run([], {}, [
    'sh',
    '-c',
    `taskset -c 0 ${process.execPath} -e "${spin}" ${done} >/dev/null 2>&1 &`,
  ])
  const stranger = await spun()
  const others = used(mark)
  // 300 ms of CPU is 30 percent-seconds; jiffies are 10 ms.
  assert.ok(ours.ours >= 25, JSON.stringify(ours))
  assert.ok(others.ours <= 5 && others.others >= 25, JSON.stringify(others))
  // Someone else's is named among the busiest other processes, as pinned to CPU 0; ours is not.
  assert.equal(ours.named(child.pid as number), undefined)
  const named = others.named(stranger)
  assert.ok(named?.pinned === true && named.used >= 25, JSON.stringify(named))
})

test('a CPU list as /proc prints it', () => {
  assert.deepEqual([...cpuList('0')], [0])
  assert.deepEqual([...cpuList('0-1')], [0, 1])
  assert.deepEqual([...cpuList('0,2-4,7')], [0, 2, 3, 4, 7])
  assert.deepEqual([...cpuList('')], [])
})

test('priming goes on while V8 helper threads work, and stops once they are quiet', {
  skip: existsSync('/proc/self/task') ? false : 'needs /proc',
}, async () => {
  const sleep = () => new Promise((resolve) => setTimeout(resolve, 500))
  assert.deepEqual(await primeUntilQuiet(sleep, async () => [], 0.5), { slices: 1, helperMs: 0 })
  // A thread named like V8's helpers spins for 1.5 s, then the process idles.
  const busy = `new (require('node:worker_threads').Worker)('const end = Date.now() + 1500; while (Date.now() < end);', { eval: true, name: 'V8Worker' }); setTimeout(() => {}, 10000)`
  const child = spawn(process.execPath, ['-e', busy], { stdio: 'ignore' })
  after(() => child.kill())
  const { slices } = await primeUntilQuiet(sleep, async () => [child.pid as number], 0.5)
  child.kill()
  assert.ok(slices >= 3 && slices <= 6, `${slices} slices`)
})

test('settling waits while a server still works, and gives up at its bound', {
  skip: existsSync('/proc/self/task') ? false : 'needs /proc',
}, async () => {
  // Spins 1 s, then idles: quiet for 0.5 s only after the spin.
  const spinThenIdle = spawn(
    process.execPath,
    ['-e', 'const end = Date.now() + 1000; while (Date.now() < end); setTimeout(() => {}, 20000)'],
    { stdio: 'ignore' },
  )
  after(() => spinThenIdle.kill())
  const settled = await settle(async () => [spinThenIdle.pid as number], 0.5, 10)
  spinThenIdle.kill()
  assert.ok(settled.quiet && settled.waitedSec >= 1.2, JSON.stringify(settled))
  // Spins for good: not quiet within 1 s.
  const spinning = spawn(process.execPath, ['-e', 'for (;;);'], { stdio: 'ignore' })
  after(() => spinning.kill())
  const bounded = await settle(async () => [spinning.pid as number], 0.5, 1)
  spinning.kill()
  assert.ok(
    !bounded.quiet && bounded.waitedSec >= 1 && bounded.waitedSec < 2,
    JSON.stringify(bounded),
  )
  // Nothing to wait for: quiet after the quiet time itself.
  const idle = await settle(async () => [], 0.5, 10)
  assert.ok(idle.quiet && idle.waitedSec < 1, JSON.stringify(idle))
})

test('the probe names another thread that ran during a gap, and an idle probed process does no major GC', async () => {
  const log = join(dir, 'probe-threads.jsonl')
  // A worker named 'spinner' spins 150 ms of its own CPU while the main thread waits for it;
  // then idle 4 s. The worker lives on after spinning (a thread that has ended cannot be read,
  // and on a loaded machine the main thread woke after it had); until then the main thread's
  // turns take 40 ms (blocked: no garbage), as on a loaded machine, and the probe must still
  // list the new thread within a second.
  const script = `
    const { Worker } = require('node:worker_threads')
    const done = new Int32Array(new SharedArrayBuffer(4))
    const pause = new Int32Array(new SharedArrayBuffer(4))
    const slow = setInterval(() => Atomics.wait(pause, 0, 0, 40), 1)
    const w = new Worker(\`
      const { parentPort, workerData } = require('node:worker_threads')
      parentPort.on('message', () => {
        const start = process.threadCpuUsage()
        for (;;) {
          const { user, system } = process.threadCpuUsage(start)
          if (user + system >= 150000) break
        }
        Atomics.store(workerData, 0, 1)
        Atomics.notify(workerData, 0)
      })\`, { eval: true, name: 'spinner', workerData: done })
    w.on('online', () => setTimeout(() => {
      clearInterval(slow)
      console.log(Number(process.hrtime.bigint()) / 1e6)
      w.postMessage('go')
      Atomics.wait(done, 0, 0, 10000)
      setTimeout(() => w.terminate(), 4000)
    }, 1100))`
  const blockedAt = Number(
    await run([`--import=${bench('latency-probe.ts')}`, '-e', script], { TG_STALL_LOG: log }),
  )
  const lines = readFileSync(log, 'utf8')
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l))
  const blocked = lines.find(
    (l) => 'stall' in l && l.stall <= blockedAt && blockedAt <= l.stall + l.gap,
  )
  assert.ok(blocked && blocked.threads.spinner >= 140, JSON.stringify(lines))
  // The old probe's garbage (strings and maps every 20 ms) made an idle process mark-compact
  // every 1-2 s; only the first second's start-up GCs may be there now.
  const majors = lines.filter((l) => 'gc' in l && l.kind !== 1 && l.gc > blocked.stall)
  assert.deepEqual(majors, [])
})
