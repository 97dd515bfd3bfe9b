/** Tenants' statements, written once for both dialects (db.ts). */
import type { Tenant } from '../../core/ports.ts'
import * as rows from '../rows.ts'
import type { Changed, TenantChanges } from '../store.ts'
import type { SqlDb } from './db.ts'

const COLUMNS = rows.TENANT_COLUMNS

export async function createTenant(
  db: SqlDb,
  tenant: { id: string; name: string },
  at: number,
): Promise<Tenant> {
  const created = await db.change((tx) =>
    tx.all<rows.TenantRow>(
      `INSERT INTO tenants (${COLUMNS}) VALUES ($1, $2, $3, $4, NULL) RETURNING ${COLUMNS}`,
      [tenant.id, tenant.name, db.dialect.bool(true), at],
    ),
  )
  return rows.toTenant(created[0] as rows.TenantRow)
}

export async function findTenant(db: SqlDb, id: string): Promise<Tenant | undefined> {
  const found = await db.all<rows.TenantRow>(`SELECT ${COLUMNS} FROM tenants WHERE id = $1`, [id])
  return found[0] && rows.toTenant(found[0])
}

export async function listTenants(db: SqlDb): Promise<readonly Tenant[]> {
  const found = await db.all<rows.TenantRow>(`SELECT ${COLUMNS} FROM tenants ORDER BY id`)
  return found.map(rows.toTenant)
}

export async function setTenantEnabled(
  db: SqlDb,
  id: string,
  enabled: boolean,
): Promise<Tenant | undefined> {
  const changed = await db.change((tx) =>
    tx.all<rows.TenantRow>(`UPDATE tenants SET enabled = $2 WHERE id = $1 RETURNING ${COLUMNS}`, [
      id,
      db.dialect.bool(enabled),
    ]),
  )
  return changed[0] && rows.toTenant(changed[0])
}

export function updateTenant(
  db: SqlDb,
  id: string,
  changes: TenantChanges,
): Promise<Changed<Tenant> | undefined> {
  return db.change(async (tx) => {
    const found = await tx.all<rows.TenantRow>(
      `SELECT ${COLUMNS} FROM tenants WHERE id = $1 FOR UPDATE`,
      [id],
    )
    if (!found[0]) return undefined
    const before = rows.toTenant(found[0])
    const after = rows.changedTenant(before, changes)
    await tx.run('UPDATE tenants SET name = $2, rate_limit = $3::jsonb WHERE id = $1', [
      id,
      after.name,
      rows.jsonText(after.rateLimit),
    ])
    return { before, after }
  })
}
