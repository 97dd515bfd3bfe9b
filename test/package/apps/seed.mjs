// Loads the spec fixture (tenant, trusted issuer, PATs) into the store at DATA_DIR, through
// the installed package only, and opens the gate the app then protects itself with.
import { readFileSync } from 'node:fs'
import { createTokengate } from 'tokengate'

export async function openSeededGate() {
  const fixture = JSON.parse(readFileSync(process.env.FIXTURE_FILE, 'utf8'))
  const dataDir = process.env.DATA_DIR
  const seed = await createTokengate({ dataDir })
  const now = Date.now()
  await seed.store.createTenant({ id: fixture.tenantId, name: fixture.tenantId }, now)
  await seed.store.putIssuer(fixture.issuer, now)
  for (const pat of fixture.pats) await seed.store.insertPat(pat)
  await seed.close()
  return createTokengate({ dataDir })
}

/** One line the test reads: where the app listens. */
export function announce(port) {
  process.stdout.write(`listening http://127.0.0.1:${port}\n`)
}

export function stopOnSignal(close) {
  process.once('SIGTERM', () => {
    close().then(() => process.exit(0))
  })
}
