// llamacpp_probs.mjs: llama.cpp's next-token distribution at every position
// of one sequence of token ids, as the reference probe's logits are held to.
//
//   node llamacpp_probs.mjs NLC_DIR MODEL.gguf IDS.json VOCAB OUT.f32 [THREADS]
//
// NLC_DIR is the folder holding node_modules/node-llama-cpp (3.21.1, with
// its prebuilt linux-x64 CPU library: .ci/setup.sh installs it into
// third_party/node-llama-cpp); nothing is built or downloaded. IDS.json is a
// JSON array of token ids. The model runs on the CPU with an F32 KV cache,
// flash attention off, one sequence in one batch; each position's
// `controlledEvaluate` output asks for `generateNext.probabilities` with no
// sampling options (softmax of the logits). OUT.f32 receives
// len(ids) × VOCAB little-endian float32 probabilities (0 for a token
// llama.cpp leaves out of the list).
import { writeFileSync, readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [nlcDir, modelPath, idsPath, vocabArg, outPath, threadsArg] = process.argv.slice(2);
if (!outPath) {
  console.error("usage: node llamacpp_probs.mjs NLC_DIR MODEL.gguf IDS.json VOCAB OUT.f32 [THREADS]");
  process.exit(2);
}
const { getLlama, LlamaLogLevel } = await import(
  pathToFileURL(path.join(nlcDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href
);
const ids = JSON.parse(readFileSync(idsPath, "utf8"));
const V = Number(vocabArg);
const threads = Number(threadsArg || 2);

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, progressLogs: false });
const model = await llama.loadModel({ modelPath, gpuLayers: 0, useMmap: true });
const context = await model.createContext({
  contextSize: ids.length + 256, // room beyond the ids: no context shift before the last position
  batchSize: ids.length,
  sequences: 1,
  threads,
  flashAttention: false,
  experimentalKvCacheKeyType: "F32",
  experimentalKvCacheValueType: "F32",
});
const seq = context.getSequence();
const res = await seq.controlledEvaluate(ids.map((t) => [t, { generateNext: { probabilities: true } }]));
const out = new Float32Array(ids.length * V);
res.forEach((r, i) => {
  const probs = r?.next?.probabilities;
  if (!probs) throw new Error(`position ${i}: no probabilities`);
  for (const [tok, p] of probs) {
    if (tok < 0 || tok >= V) throw new Error(`position ${i}: token ${tok} outside the vocabulary of ${V}`);
    out[i * V + tok] = p;
  }
});
writeFileSync(outPath, Buffer.from(out.buffer));
await context.dispose();
await model.dispose();
await llama.dispose();
