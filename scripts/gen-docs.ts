import { writeFileSync } from 'node:fs'
import { renderConfigurationDoc } from '../src/config/docs.ts'

writeFileSync(new URL('../docs/configuration.md', import.meta.url), renderConfigurationDoc())
