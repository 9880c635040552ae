// Writes a gzip copy of each of the console's files beside it (`console.js.gz`, …), the
// bytes the service sends to browsers that accept gzip: the same input gives the same
// bytes (no name or time in the header), so the copies are checked with the build.
//
//   node scripts/compress.mjs [folder]   (default: dist)
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { constants, gzipSync } from "node:zlib";

const folder = process.argv[2] ?? "dist";
for (const name of ["index.html", "console.js", "console.css"]) {
  const bytes = readFileSync(join(folder, name));
  const gzip = gzipSync(bytes, { level: constants.Z_BEST_COMPRESSION });
  // The header's OS byte is the system's (3 on Unix): "unknown", the same everywhere.
  gzip[9] = 0xff;
  writeFileSync(join(folder, `${name}.gz`), gzip);
}
