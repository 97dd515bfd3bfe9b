import { ADMIN_OVERRIDES, type CommandDef, withStore } from '../context.ts'

const migrate: CommandDef = {
  path: ['migrate'],
  summary: 'Apply pending store migrations (the server also applies them on start)',
  options: {},
  async run(ctx) {
    const config = ctx.config(ADMIN_OVERRIDES)
    const { kind, applied } = await withStore(
      config,
      async (store, versions) => ({
        kind: store.kind,
        applied: versions,
      }),
      ctx.io,
    )
    if (ctx.json) ctx.out.json({ store: kind, applied })
    else if (applied.length === 0)
      ctx.out.line(`The ${kind} store is up to date; no migration applied.`)
    else
      ctx.out.line(
        `Applied ${kind} migration${applied.length === 1 ? '' : 's'} ${describeVersions(applied)}.`,
      )
    return 0
  },
}

/**
 * `1–4 and 6–12 (there is no migration 5: it was withdrawn before release)`: ranges, and the
 * numbers missing inside them named, so a gap does not read as a migration that failed.
 * Pending migrations are applied in order, so a gap is a number that was never released.
 */
export function describeVersions(versions: readonly number[]): string {
  const sorted = [...versions].sort((a, b) => a - b)
  const ranges: [number, number][] = []
  for (const version of sorted) {
    const last = ranges.at(-1)
    if (last && version === last[1] + 1) last[1] = version
    else ranges.push([version, version])
  }
  const shown = ranges.map(([from, to]) => (from === to ? `${from}` : `${from}–${to}`))
  const text =
    shown.length > 1 ? `${shown.slice(0, -1).join(', ')} and ${shown.at(-1)}` : `${shown[0]}`
  const missing: number[] = []
  for (let i = 1; i < ranges.length; i++) {
    for (
      let v = (ranges[i - 1] as [number, number])[1] + 1;
      v < (ranges[i] as [number, number])[0];
      v++
    ) {
      missing.push(v)
    }
  }
  if (missing.length === 0) return text
  const [only] = missing
  return missing.length === 1
    ? `${text} (there is no migration ${only}: it was withdrawn before release)`
    : `${text} (there are no migrations ${missing.join(', ')}: they were withdrawn before release)`
}

/** `migrate`. */
export const migrateCommands: readonly CommandDef[] = [migrate]
