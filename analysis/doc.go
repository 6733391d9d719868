// Package analysis runs the measurements that need many forward passes
// and writes their tables, manifests and pass files:
//
//   - the run engine (stream.go, merge.go): one run spec (RunSpec), one
//     manifest type (RunRecord), resume, shards and MergeStream for every
//     measurement, a type with tables, pass and finish (measurement; a new
//     diagnostic is one probes consumer plus one such type);
//   - the measurements on it: the App. I sweep (run.go, aggregate.go,
//     paper.go, report.go; below), `probe diag` (diag.go), `probe gdn`,
//     `probe sinks`, `probe massive` and `probe experts` (gdn.go, sinks.go,
//     massive.go, experts_run.go), perplexity and BFT's Prediction 3
//     (ppl.go) and Wu et al.'s retrieval heads (retrieval.go);
//   - the bf16-against-float32 deviation tables (deviation.go);
//   - the shared pieces: chunk plans over a token stream (chunks.go),
//     Parquet/CSV/JSONL tables (tables.go), manifests (manifest.go),
//     statistics (stats.go);
//   - AFA Figs. 1–3's toy-system checkpoints evaluated (afatoy.go) into
//     afatab.Toy, which report/papers draws.
//
// What the runs write and the reports read — the manifests (RunRecord and
// every kind's), options, table rows, column-value and metric names — is
// declared in the model-free package analysis/results, so that report/...
// can draw it without depending on analysis, model or probes.
//
// # The App. I sweep
//
// The zero-training diagnostic of Long et al.,
// "Precision Tracked Transformer via Kalman Filtering, Kriging and Process
// Noise" (arXiv:2605.18832, App. I), end to end: a sweep over context
// lengths and samples cut from a token stream, one forward pass per
// (T, sample) with the per-row filter diagnostics of package probes on every
// layer, exact aggregation as in the paper (and in its other plausible
// readings), and Figs. 2–4 with the paper's published numbers beside them.
//
// # Sweep
//
// ParseLengths reads "1k,2k,4k" with an explicit k (1000 or 1024);
// PlanChunks cuts non-overlapping chunks from one token stream and records
// their [start, end) offsets. Sweep.Run runs the passes (optionally one
// shard of them) on the run engine that every measurement shares
// (runStream, kind "sweep"), writing the Parquet pass files of each
// (T, sample) atomically (temporary file, fsync, rename); a finished file
// is recognised by its Parquet footer, which holds the pass's record and
// the hash of everything that determines it (model files, token ids,
// options), so a re-run skips exactly the passes that are complete and
// were made the same way. MergeStream combines shard folders into the
// tables an unsharded run writes.
//
// # Tables
//
// A pass file holds bucket rows: for each (layer, head, metric) and query
// bucket, the count, sum and centred sum of squares of the metric's finite
// values (Moments). Buckets are cut at the window starts too, so every
// aggregate of App. I (last 25 % of queries, last k layers, second-half BOS
// mass, per-(layer, head) cells) is an exact combination of bucket rows,
// not an approximation from bucket means. finishSweep writes, in Parquet and
// optionally CSV/JSONL: buckets (all pass rows), heads (per (T, layer,
// head, metric, window) summaries), fig2, fig3, fig4, plus summary.json and
// manifest.json (checkpoint and tokenizer hashes, every option, chunk
// offsets, tool version, timings, threads).
//
// # Ambiguities
//
// Each choice the paper leaves open is an option with a documented default
// (SweepOptions, AggOptions, ProbeOptions) recorded in the manifest: k, the
// chunk layout, the BOS token (and that it counts in T), the std
// convention (both stored) and its ddof, the λobs ratio reading (all three
// stored), the Fig. 4 lengths and weighting.
package analysis
