// The npm registry reachable from this project's machines lacks some other-platform binary
// packages (biome's darwin/win32/musl builds, msgpackr-extract's darwin/win32/arm ones). npm then
// leaves them out of package-lock.json, and `npm ci` refuses the lockfile as out of sync. This
// adds their lock entries, marked optional with the os/cpu they are for, so `npm ci` skips them
// on this platform exactly as it would with a complete lockfile. Run after changing dependencies.
import { readFileSync, writeFileSync } from 'node:fs';

const PLATFORM = {
  'android-arm64': [['android'], ['arm64']],
  'android-x64': [['android'], ['x64']],
  'darwin-arm64': [['darwin'], ['arm64']],
  'darwin-x64': [['darwin'], ['x64']],
  'linux-arm': [['linux'], ['arm']],
  'linux-arm64': [['linux'], ['arm64']],
  'linux-arm64-musl': [['linux'], ['arm64']],
  'linux-x64': [['linux'], ['x64']],
  'linux-x64-musl': [['linux'], ['x64']],
  'win32-arm64': [['win32'], ['arm64']],
  'win32-x64': [['win32'], ['x64']],
};

const lock = JSON.parse(readFileSync('package-lock.json', 'utf8'));
const packages = lock.packages;
let added = 0;
for (const [path, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const key = `node_modules/${name}`;
    if (packages[key]) continue;
    const suffix = Object.keys(PLATFORM).find((p) => name.endsWith(`-${p}`));
    if (!suffix) continue;
    const [os, cpu] = PLATFORM[suffix];
    packages[key] = { version, ...(entry.dev ? { dev: true } : {}), cpu, optional: true, os };
    added++;
    void path;
  }
}
writeFileSync('package-lock.json', `${JSON.stringify(lock, null, 2)}\n`);
console.log(`added ${added} platform stub entries`);
