/**
 * bench/profile.ts must read the main thread's profile of the loaded window: the tenth
 * session's `profile.ts gateway proxy` printed the 537 ms start-up profile of the gateway's
 * first image (before it restarts itself with execve) as if it were the load's.
 */
import assert from 'node:assert/strict'
import { test } from 'node:test'
import { loadedProfile } from '../../bench/cpu-profiles.ts'

test('the main thread profile that ended last is the loaded one, whatever sorts first', () => {
  // What one gateway wrote under `--cpu-prof` (bench/servers/tokengate.ts, SQLite writer thread).
  const written = [
    // The first image: start-up until its execve (528 ms).
    { file: 'CPU.20261129.131405.13703.0.001.cpuprofile', endTime: 4_105_528_000 },
    // The restarted image: start-up, then the load, until SIGTERM.
    { file: 'CPU.20261129.131406.13703.0.001.cpuprofile', endTime: 4_108_802_000 },
    // The SQLite writer thread, ended a moment after the main thread.
    { file: 'CPU.20261129.131407.13703.1.002.cpuprofile', endTime: 4_108_803_000 },
  ]
  assert.equal(loadedProfile(written), 'CPU.20261129.131406.13703.0.001.cpuprofile')
  assert.equal(loadedProfile([...written].reverse()), 'CPU.20261129.131406.13703.0.001.cpuprofile')
})

test('one main thread profile is read as it is; none, or only a worker thread, gives none', () => {
  const only = { file: 'CPU.20261129.131406.13703.0.001.cpuprofile', endTime: 1 }
  assert.equal(loadedProfile([only]), only.file)
  assert.equal(loadedProfile([]), undefined)
  assert.equal(
    loadedProfile([{ file: 'CPU.20261129.131407.13703.1.002.cpuprofile', endTime: 2 }]),
    undefined,
  )
  assert.equal(loadedProfile([{ file: 'gateway-proxy.cpuprofile', endTime: 2 }]), undefined)
})
