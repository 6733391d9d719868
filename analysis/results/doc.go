// Package results holds what the runs of package analysis write and what
// reads them back, without running anything:
//
//   - every measurement's manifest: the RunRecord that all kinds share
//     (record.go, manifest.go: ToolInfo, ModelInfo, SourceInfo, Shard,
//     Chunk, StreamPass, Deviation) plus each kind's options and fields —
//     the App. I sweep's Manifest (SweepOptions, ProbeOptions,
//     AggOptions), GDNManifest, SinksManifest, MassiveManifest,
//     ExpertsManifest, RetrievalManifest, PPLManifest — and their file
//     names;
//   - the row types of their Parquet and CSV tables (HeadRow, Fig2Row …
//     Fig4Row and Summary of a sweep, GDNRow, SinkHeadRow, PPLSummaryRow,
//     …), the sweep's aggregated Results and a ppl run's PPLResults;
//   - the names the columns take: metric names (MetricNEff, … — the names
//     probes.Collector computes under), mixers, interventions, margins,
//     gate variants, layer groups, λobs ratio readings;
//   - the paper's published App. I numbers (Paper), ReadTable, and the
//     statistics computed from rows alone (SinkRate, SinkRates).
//
// It imports nothing that runs a model (model, probes, analysis), so that
// the report packages, which draw these types, need not depend on them;
// analysis runs the measurements and fills them in.
package results
