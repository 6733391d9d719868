// Package results holds what the runs of package analysis write and what
// reads them back, without running anything: every measurement's manifest
// (the RunRecord that all kinds share — ToolInfo, ModelInfo, SourceInfo,
// Shard, Chunk, StreamPass — plus each kind's options and fields:
// GDNManifest, SinksManifest, MassiveManifest, ExpertsManifest,
// RetrievalManifest), their manifest file names, the row types of their
// Parquet and CSV tables (GDNRow, SinkHeadRow, …), the names their
// columns take (mixers, interventions, margins), ReadTable, and the
// statistics computed from rows alone (SinkRate, SinkRates).
//
// It imports nothing that runs a model (model, probes, analysis), so that
// the report packages, which draw these types, need not depend on them;
// analysis runs the measurements and fills them in.
package results
