import { mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export interface TlsMaterial {
  readonly cert: string
  readonly key: string
}

/** Reads the operator's certificate and key (PEM). */
export function readTlsFiles(certFile: string, keyFile: string): TlsMaterial {
  return { cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') }
}

/**
 * Dev mode: a self-signed certificate for 127.0.0.1 and localhost, generated once into
 * `<dataDir>/tls/` (key mode 0600) and reused on later starts, so `curl -k` keeps working and
 * a browser exception survives restarts. Never used outside dev mode.
 */
export async function ensureDevCertificate(dataDir: string): Promise<TlsMaterial> {
  const dir = join(dataDir, 'tls')
  const certPath = join(dir, 'dev-cert.pem')
  const keyPath = join(dir, 'dev-key.pem')
  try {
    return readTlsFiles(certPath, keyPath)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error
  }
  const notBeforeDate = new Date()
  const notAfterDate = new Date(notBeforeDate.getTime() + 825 * 86_400_000)
  // Loaded on demand: selfsigned and its X.509 stack are ~200 modules, needed only here.
  const { generate } = await import('selfsigned')
  const pems = await generate([{ name: 'commonName', value: 'tokengate dev' }], {
    keyType: 'ec',
    curve: 'P-256',
    algorithm: 'sha256',
    notBeforeDate,
    notAfterDate,
    extensions: [
      { name: 'basicConstraints', cA: false },
      { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
      { name: 'extKeyUsage', serverAuth: true },
      {
        name: 'subjectAltName',
        altNames: [
          { type: 2, value: 'localhost' },
          { type: 7, ip: '127.0.0.1' },
          { type: 7, ip: '::1' },
        ],
      },
    ],
  })
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  writeFileSync(keyPath, pems.private, { mode: 0o600 })
  writeFileSync(certPath, pems.cert, { mode: 0o644 })
  return { cert: pems.cert, key: pems.private }
}
