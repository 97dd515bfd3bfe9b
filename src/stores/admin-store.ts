export type {
  AdminRole,
  AdminStore,
  AdminTokenRecord,
  AuditSearch,
  PatSearch,
} from './store.ts'

/** `%`, `_` and `\` taken literally in a LIKE pattern (escape character `\`). */
export function likeContains(text: string): string {
  return `%${text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`
}
