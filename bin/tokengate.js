#!/usr/bin/env node
// The `tokengate` bin. The sources are TypeScript run directly by Node >= 24.12 (type stripping).
import '../src/cli/main.ts'
