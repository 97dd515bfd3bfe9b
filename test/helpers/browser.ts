/**
 * Debian's chromium, headless, through playwright-core (nothing is downloaded). The flags keep
 * it off the network (this machine has none) and `--ignore-certificate-errors-spki-list`
 * trusts exactly the given certificate's key, as a CA pin would, and no other certificate.
 * Each launch gets a fresh temporary profile from playwright.
 */
import { createHash, X509Certificate } from 'node:crypto'
import { type Browser, chromium } from 'playwright-core'
import { binaryPath } from './services.ts'

export async function launchChromium(trustedCertificatePem: string): Promise<Browser> {
  const spki = new X509Certificate(trustedCertificatePem).publicKey.export({
    type: 'spki',
    format: 'der',
  })
  const pin = createHash('sha256').update(spki).digest('base64')
  return chromium.launch({
    executablePath: binaryPath('chromium') as string,
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--ignore-certificate-errors-spki-list=${pin}`,
    ],
  })
}
