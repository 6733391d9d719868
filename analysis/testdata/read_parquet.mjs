// Reads a Parquet file with hyparquet (an independent JavaScript
// implementation) and prints its footer key/value metadata and rows as JSON,
// with non-finite doubles as the strings "NaN", "Infinity", "-Infinity".
// usage: node read_parquet.mjs <hyparquet package folder> <file.parquet>
const [pkg, path] = process.argv.slice(2)
const hp = await import(pkg + '/src/index.js')
const { asyncBufferFromFile } = await import(pkg + '/src/node.js')
const file = await asyncBufferFromFile(path)
const meta = await hp.parquetMetadataAsync(file)
const rows = await hp.parquetReadObjects({ file })
const kv = {}
for (const e of meta.key_value_metadata ?? []) kv[e.key] = e.value
process.stdout.write(JSON.stringify({ kv, rows }, (k, v) =>
  typeof v === 'bigint' ? Number(v) : (typeof v === 'number' && !Number.isFinite(v) ? String(v) : v)))
