/** Trusted issuers' and stored policies' statements, written once for both dialects (db.ts). */
import type { IssuerConfig } from '../../core/issuer.ts'
import * as rows from '../rows.ts'
import type { StoredIssuer, StoredPolicy } from '../store.ts'
import type { SqlDb } from './db.ts'

export async function putIssuer(db: SqlDb, issuer: IssuerConfig, at: number): Promise<void> {
  const { name, config } = rows.issuerValues(issuer)
  await db.change((tx) =>
    tx.run(
      `INSERT INTO issuers (${rows.ISSUER_COLUMNS}) VALUES ($1, $2::jsonb, $3)
       ON CONFLICT (issuer) DO UPDATE SET config = excluded.config`,
      [name, config, at],
    ),
  )
}

export async function listIssuers(db: SqlDb): Promise<readonly StoredIssuer[]> {
  const found = await db.all<rows.IssuerRow>(
    `SELECT ${rows.ISSUER_COLUMNS} FROM issuers ORDER BY issuer`,
  )
  return found.map(rows.toIssuer)
}

export async function removeIssuer(db: SqlDb, issuer: string): Promise<boolean> {
  return (await db.change((tx) => tx.run('DELETE FROM issuers WHERE issuer = $1', [issuer]))) > 0
}

export async function getPolicy(db: SqlDb, name: string): Promise<StoredPolicy | undefined> {
  const found = await db.all<{ name: string; text: string; updated_at: number | string }>(
    'SELECT name, text, updated_at FROM policies WHERE name = $1',
    [name],
  )
  const row = found[0]
  return row && { name: row.name, text: row.text, updatedAt: Number(row.updated_at) }
}

export async function putPolicy(db: SqlDb, name: string, text: string, at: number): Promise<void> {
  await db.change((tx) =>
    tx.run(
      `INSERT INTO policies (name, text, updated_at) VALUES ($1, $2, $3)
       ON CONFLICT (name) DO UPDATE SET text = excluded.text, updated_at = excluded.updated_at`,
      [name, text, at],
    ),
  )
}

export async function removePolicy(db: SqlDb, name: string): Promise<boolean> {
  return (await db.change((tx) => tx.run('DELETE FROM policies WHERE name = $1', [name]))) > 0
}
