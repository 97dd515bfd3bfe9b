import assert from 'node:assert/strict'
import { after, describe, it } from 'node:test'
import { pathToFileURL } from 'node:url'
import { cliInvocation, devCommands, formatDevBanner } from '../../src/cli/dev-banner.ts'
import { loadConfig } from '../../src/config/load.ts'
import { tempDataDir } from './helpers.ts'

describe('dev banner CLI hints', () => {
  const data = tempDataDir()
  after(() => data.cleanup())
  const config = loadConfig({ env: {}, overrides: { dev: true, dataDir: data.dir } })
  const seed = { tenantId: 'demo', demoPat: undefined }

  it('names the installed bin when tokengate runs from node_modules, the npm script from a clone', () => {
    const installed = pathToFileURL('/srv/app/node_modules/tokengate/src/cli/dev-banner.ts').href
    const clone = pathToFileURL('/home/me/tokengate/src/cli/dev-banner.ts').href
    assert.equal(cliInvocation(installed), 'npx tokengate')
    assert.equal(cliInvocation(clone), 'npm run tokengate --')
    // This test runs from the repository itself.
    assert.equal(cliInvocation(), 'npm run tokengate --')
  })

  it('every CLI hint of the banner uses the invocation it is given', async () => {
    const url = 'https://127.0.0.1:8443'
    const commands = await devCommands(config, seed, url, Date.now(), 'npx tokengate')
    const text = formatDevBanner(commands, config, 'npx tokengate')
    assert.match(text, /^npx tokengate --data-dir \S+ pat issue --tenant demo /m)
    assert.match(text, /^ {2}npx tokengate --data-dir \S+ jwt mint --dev /m)
    assert.doesNotMatch(text, /npm run/)
    const fromClone = formatDevBanner(await devCommands(config, seed, url, Date.now()), config)
    assert.match(fromClone, /^npm run tokengate -- --data-dir \S+ pat issue /m)
    assert.match(fromClone, /^ {2}npm run tokengate -- --data-dir \S+ jwt mint --dev /m)
  })
})
