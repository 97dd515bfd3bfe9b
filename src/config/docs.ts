import { ENV_VARIABLES, SECRET_ENV_VARIABLES } from './load.ts'
import { ConfigSchema } from './schema.ts'

interface SchemaNode {
  type?: string
  description?: string
  default?: unknown
  properties?: Record<string, SchemaNode>
  anyOf?: SchemaNode[]
  const?: unknown
  minimum?: number
  maximum?: number
  pattern?: string
  items?: SchemaNode
}

/** Renders docs/configuration.md from the schema's descriptions, so the two never drift. */
export function renderConfigurationDoc(): string {
  const envByPath = new Map(Object.entries(ENV_VARIABLES).map(([name, path]) => [path, name]))
  const rows: string[] = []
  walk(ConfigSchema as unknown as SchemaNode, '', rows, envByPath)
  return [
    '# Configuration',
    '',
    'Generated from `src/config/schema.ts` by `npm run docs`; do not edit by hand.',
    '',
    'Sources, lowest to highest precedence: defaults, the config file (`--config FILE` or',
    '`TOKENGATE_CONFIG`, JSON or YAML, same shape as the table), environment variables,',
    'command-line flags. Every problem is reported at once, by path, and the server refuses',
    'to start on any of them.',
    '',
    'Each variable that can carry a secret can instead name a file holding it, `<NAME>_FILE`',
    '(e.g. `DATABASE_URL_FILE=/run/secrets/database-url`), as container platforms mount',
    'secrets: one trailing newline is trimmed, and setting both `<NAME>` and `<NAME>_FILE` is',
    'an error. The other secrets are files already (`secretKeyFile`, `server.tlsKeyFile`,',
    '`identityToken.keysFile`).',
    '',
    '| setting | type | default | environment | description |',
    '| --- | --- | --- | --- | --- |',
    ...rows,
    '',
  ].join('\n')
}

function walk(node: SchemaNode, path: string, rows: string[], env: Map<string, string>): void {
  for (const [key, child] of Object.entries(node.properties ?? {})) {
    const childPath = path ? `${path}.${key}` : key
    if (child.properties) {
      walk(child, childPath, rows, env)
      continue
    }
    // An array of objects gets its own row, then one row per field of an element (`x[].y`).
    const element = child.items?.properties ? child.items : undefined
    const type = child.anyOf
      ? child.anyOf.map((c) => ('const' in c ? JSON.stringify(c.const) : c.type)).join(' \\| ')
      : child.items
        ? `array of ${child.items.type ?? 'any'}`
        : (child.type ?? 'any')
    const constrained = element ? child : (child.items ?? child)
    const bounds = [
      constrained.minimum !== undefined ? `≥ ${constrained.minimum}` : '',
      constrained.maximum !== undefined ? `≤ ${constrained.maximum}` : '',
      constrained.pattern ? `\`${constrained.pattern}\`` : '',
    ]
      .filter(Boolean)
      .join(', ')
    const def = child.default === undefined ? '' : `\`${JSON.stringify(child.default)}\``
    const variable = env.get(childPath)
    const named = !variable
      ? ''
      : SECRET_ENV_VARIABLES.includes(variable)
        ? `\`${variable}\` or \`${variable}_FILE\``
        : `\`${variable}\``
    rows.push(
      `| \`${childPath}\` | ${type}${bounds ? ` (${bounds})` : ''} | ${def} | ${named} | ${child.description ?? ''} |`,
    )
    if (element) walk(element, `${childPath}[]`, rows, env)
  }
}
