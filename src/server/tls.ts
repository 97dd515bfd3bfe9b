import { createPrivateKey, type KeyObject, X509Certificate } from 'node:crypto'
import { chmodSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { createDirectoryOnce } from '../lib/create-once.ts'

export interface TlsMaterial {
  readonly cert: string
  readonly key: string
  /** Mutual TLS (`server.clientCertificates`): the CA bundle client certificates must chain to. */
  readonly clientCertificates?: ClientCertificates | undefined
}

export interface ClientCertificates {
  /** PEM bundle of the accepted client CAs. */
  readonly ca: string
  readonly mode: 'optional' | 'required'
}

/**
 * Mozilla's "intermediate" TLS 1.2 suites (ssl-config.mozilla.org, v5.7): ECDHE (and DHE)
 * key exchange with AES-GCM or ChaCha20-Poly1305 only. Node's default list is OpenSSL's
 * `HIGH`, which also offers CBC-mode (Lucky13-style padding oracles) and ARIA/Camellia
 * suites; AEAD-only is what Envoy's and HAProxy's recommended configurations offer. TLS 1.3
 * suites are all AEAD and are left to OpenSSL.
 */
export const TLS12_CIPHERS = [
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
  'DHE-RSA-AES128-GCM-SHA256',
  'DHE-RSA-AES256-GCM-SHA384',
  'DHE-RSA-CHACHA20-POLY1305',
].join(':')

/** The `node:tls` server options for a listener: the material, TLS 1.2+, AEAD suites. */
export function tlsServerOptions(material: TlsMaterial) {
  return {
    cert: material.cert,
    key: material.key,
    minVersion: 'TLSv1.2' as const,
    ciphers: TLS12_CIPHERS,
    // Mozilla intermediate: every suite offered is strong, so the client's order wins (a
    // client without AES hardware may prefer ChaCha20).
    honorCipherOrder: false,
    ...clientCertificateOptions(material.clientCertificates),
  }
}

/**
 * Asks for a client certificate when configured. `optional` lets a client without one (or
 * with one the CA did not sign) finish the handshake; such a certificate never counts
 * (http/peer-certificate.ts reads only `socket.authorized` ones). `required` refuses the
 * handshake.
 */
function clientCertificateOptions(client: ClientCertificates | undefined) {
  if (client === undefined) return {}
  return { ca: client.ca, requestCert: true, rejectUnauthorized: client.mode === 'required' }
}

/** Reads and checks the client CA bundle: at least one PEM certificate. Throws naming the file. */
export function readClientCa(caFile: string): string {
  const ca = readFileSync(caFile, 'utf8')
  try {
    new X509Certificate(ca)
  } catch {
    throw new Error(`${caFile} holds no PEM certificate (expected the client CA bundle)`)
  }
  return ca
}

/**
 * Reads the operator's certificate and key (PEM) and checks them: Node's TLS server takes an
 * empty file, or a key of another certificate, and fails every handshake later. Throws naming
 * the file at fault.
 */
export function readTlsFiles(certFile: string, keyFile: string): TlsMaterial {
  const cert = readFileSync(certFile, 'utf8')
  const key = readFileSync(keyFile, 'utf8')
  if (cert.trim() === '') throw new Error(`${certFile} is empty (expected a PEM certificate)`)
  if (key.trim() === '') throw new Error(`${keyFile} is empty (expected a PEM private key)`)
  let certificate: X509Certificate
  try {
    certificate = new X509Certificate(cert)
  } catch {
    throw new Error(`${certFile} holds no PEM certificate`)
  }
  let privateKey: KeyObject
  try {
    privateKey = createPrivateKey(key)
  } catch {
    throw new Error(`${keyFile} holds no PEM private key (an encrypted key is not supported)`)
  }
  if (!certificate.checkPrivateKey(privateKey)) {
    throw new Error(`the key in ${keyFile} does not belong to the certificate in ${certFile}`)
  }
  return { cert, key }
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
    const material = readTlsFiles(certPath, keyPath)
    // A key written by an earlier version, or copied in, is tightened like a new one.
    chmodSync(keyPath, 0o600)
    return material
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
  // The pair is written as one directory: of several processes starting on one fresh data
  // directory, all serve the first one's certificate with its own key.
  const written = createDirectoryOnce(
    dir,
    {
      'dev-key.pem': { content: pems.private, mode: 0o600 },
      'dev-cert.pem': { content: pems.cert, mode: 0o644 },
    },
    0o700,
  )
  return { cert: written['dev-cert.pem'] as string, key: written['dev-key.pem'] as string }
}
