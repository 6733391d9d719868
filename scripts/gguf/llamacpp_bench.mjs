// llamacpp_bench.mjs: llama.cpp's prompt evaluation time on a GGUF file.
//
//   node llamacpp_bench.mjs NLC_DIR MODEL.gguf IDS.json THREADS FLASH(0|1)
//
// Loads the model once with node-llama-cpp (NLC_DIR holds its
// node_modules; the prebuilt CPU library, nothing built or downloaded),
// makes a context of len(ids) tokens (one sequence, batch = ubatch = the
// whole prompt, flash attention on or off, the default F16 KV cache) and
// evaluates the ids once without generating (llama_decode of the prompt).
// Prints one JSON line: tokens, threads, flash_attention, seconds,
// cpu_seconds (the process's user + system CPU time over the evaluation,
// process.cpuUsage: every thread of llama.cpp's pool), tokens_per_s. One evaluation per process: the script that calls it
// alternates runs.
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nlcDir, modelPath, idsPath, threadsArg, flashArg] = process.argv.slice(2);
if (!flashArg) {
  console.error("usage: node llamacpp_bench.mjs NLC_DIR MODEL.gguf IDS.json THREADS FLASH(0|1)");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nlcDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href
);
const ids = JSON.parse(readFileSync(idsPath, "utf8"));
const threads = Number(threadsArg);
const flash = flashArg === "1";
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({
  contextSize: ids.length + 256,
  batchSize: ids.length,
  sequences: 1,
  threads,
  flashAttention: flash,
  // node-llama-cpp's estimate of the context's memory refuses T = 32k of a
  // 1.7B model on 24 GB although the evaluation fits (the caller measures
  // what it takes); the estimate is not llama.cpp's own check
  ignoreMemorySafetyChecks: true,
});
const seq = context.getSequence();
const t0 = process.hrtime.bigint();
const c0 = process.cpuUsage();
await seq.evaluateWithoutGeneratingNewTokens(ids);
const s = Number(process.hrtime.bigint() - t0) / 1e9;
const c = process.cpuUsage(c0);
const cpu = (c.user + c.system) / 1e6;
console.log(JSON.stringify({ tokens: ids.length, threads, flash_attention: flash, seconds: s, cpu_seconds: cpu, tokens_per_s: ids.length / s }));
await context.dispose();
await model.dispose();
await llama.dispose();
