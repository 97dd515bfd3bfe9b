/**
 * `npm run test:package` (a CI step of .ci/run): what users install is what is tested.
 *
 * 1. consumers.ts packs the repository and installs the tarball into three fresh projects
 *    (Node 24; Node 22; `--omit=optional`), once for every step below.
 * 2. The package's own suites (test/package/*.package.ts): the consumer apps of every
 *    framework on Node 24 and 22, the typed principal, the installed bin, the CLI under
 *    `--omit=optional`, and every documented command (docs.package.ts).
 * 3. The end-to-end suites of `END_TO_END` with `TOKENGATE_TEST_PACKAGE` naming the Node 24
 *    project: the helpers then run its installed `tokengate` bin instead of the sources
 *    (test/helpers/launch.ts), so the server, gateway, decision API behind real nginx and
 *    Caddy, console in chromium, workers, CLI and Postgres/Redis suites run on the package.
 * 4. `ON_NODE_22` of them again with the Node 22 project.
 *
 * Prints each step's time. Exits non-zero when any step fails (each step still runs).
 */
import { spawnSync } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { prepareConsumers, REPO } from './consumers.ts'

/** Suites whose helpers start tokengate or run its CLI (each also runs in `npm test`). */
export const END_TO_END = [
  'test/server/start-failure.test.ts',
  'test/server/startup-lines.test.ts',
  'test/server/e2e.test.ts',
  'test/server/spec-table.test.ts',
  'test/server/tls.test.ts',
  'test/server/cors.test.ts',
  'test/server/limits.test.ts',
  'test/server/metrics.test.ts',
  'test/server/workers.test.ts',
  'test/server/abuse/*.test.ts',
  'test/server/routes/tokens.test.ts',
  'test/server/rotation-reuse.test.ts',
  'test/admin/console.browser.test.ts',
  'test/admin/console-http.test.ts',
  'test/admin/admin-api.test.ts',
  'test/admin/admin-cli.test.ts',
  'test/decision/decision.test.ts',
  'test/decision/proxies.test.ts',
  'test/decision/nginx-lua.test.ts',
  'test/gateway/proxy.test.ts',
  'test/gateway/smuggling.test.ts',
  'test/gateway/relay.test.ts',
  'test/gateway/reload.test.ts',
  'test/scale/propagation.test.ts',
  'test/scale/outage.test.ts',
  'test/attack/pat.test.ts',
  'test/attack/headers.test.ts',
  'test/attack/jwt.test.ts',
  'test/events/delivery.test.ts',
  // The CLI suites that run on the wall clock (pat and jwt pin the time in-process).
  'test/cli/main.test.ts',
  'test/cli/serve.test.ts',
  'test/cli/serve-signals.test.ts',
  'test/cli/serve-npx.test.ts',
  'test/cli/tenant.test.ts',
  'test/cli/issuer.test.ts',
  'test/cli/apply.test.ts',
  'test/cli/migrate-openapi.test.ts',
  'test/cli/terminal-safety.test.ts',
  'test/package/operator-errors.test.ts',
]

/** The Node 22 subset: the server, the console, workers, the proxies, Postgres, the CLI. */
export const ON_NODE_22 = [
  'test/server/start-failure.test.ts',
  'test/server/startup-lines.test.ts',
  'test/server/e2e.test.ts',
  'test/server/spec-table.test.ts',
  'test/server/workers.test.ts',
  'test/admin/console.browser.test.ts',
  'test/decision/proxies.test.ts',
  'test/gateway/proxy.test.ts',
  'test/scale/propagation.test.ts',
  'test/cli/main.test.ts',
  'test/cli/tenant.test.ts',
  'test/cli/apply.test.ts',
]

function step(name: string, files: readonly string[], env: NodeJS.ProcessEnv): boolean {
  const started = performance.now()
  const result = spawnSync(
    process.execPath,
    ['--test', '--test-concurrency=2', '--test-timeout=600000', ...files],
    { cwd: REPO, env: { ...process.env, ...env }, stdio: 'inherit' },
  )
  const seconds = ((performance.now() - started) / 1000).toFixed(0)
  const ok = result.status === 0
  process.stdout.write(
    `# test:package step "${name}": ${ok ? 'passed' : 'FAILED'} in ${seconds} s\n`,
  )
  return ok
}

if (import.meta.main) {
  const root = mkdtempSync(join(tmpdir(), 'tokengate-package-'))
  try {
    const started = performance.now()
    const made = await prepareConsumers(root)
    process.stdout.write(
      `# test:package: packed and installed in ${((performance.now() - started) / 1000).toFixed(0)} s; tarball ${made.packed.size} bytes, ${made.packed.entryCount} files, ${made.packed.unpackedSize} bytes unpacked\n`,
    )
    const shared = { TOKENGATE_PACKAGE_ROOT: root }
    const results = [
      step('package suites', ['test/package/*.package.ts'], shared),
      step('end-to-end suites on the package, Node 24', END_TO_END, {
        ...shared,
        TOKENGATE_TEST_PACKAGE: made.node24,
      }),
      step('end-to-end subset on the package, Node 22', ON_NODE_22, {
        ...shared,
        TOKENGATE_TEST_PACKAGE: made.node22,
      }),
    ]
    process.exitCode = results.every(Boolean) ? 0 : 1
  } finally {
    rmSync(root, { recursive: true, force: true })
  }
}
