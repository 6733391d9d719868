package main

import (
	"fmt"
	"io"
	"sort"

	"github.com/filterlens/probe/analysis"
)

// cmdRetrieval writes Wu et al.'s retrieval score of every softmax head on
// a synthetic copy task (a segment of distinct tokens, filler, the segment
// again): retrieval_heads and retrieval_manifest.json (docs/diagnostics.md,
// "Retrieval heads").
func cmdRetrieval(args []string, w io.Writer) error {
	fs := newFlags("retrieval")
	d := analysis.DefaultRetrievalOptions()
	mf := addModelFlag(fs, "checkpoint (required)")
	segment := fs.Int("segment", d.Segment, "length n of the repeated segment of distinct token ids")
	gap := fs.Int("gap", d.Gap, "filler tokens between the two copies (T = 2 × segment + gap)")
	samples := fs.Int("samples", d.Samples, "passes, each with its own segment and filler")
	seed := fs.Uint64("seed", d.Seed, "seed of the segments and fillers")
	steps := fs.String("steps", d.Steps, "copy steps scored: copied (the model's greedy next token is the copy, as Wu et al. count) or all")
	above := fs.Float64("above", d.Above, "score above which a head counts as a retrieval head (Wu et al.: 0.1)")
	tile := addTileFlag(fs)
	allowExt := addExtrapolationFlag(fs)
	threads := addThreadsFlag(fs)
	formats := fs.String("format", "parquet,csv", "table formats: any of parquet,csv,jsonl")
	out := fs.String("out", "", "output folder (required)")
	force := fs.Bool("force", false, "write into an --out that already holds files (tables of the same names are replaced)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return fmt.Errorf("unexpected argument %q", pos[0])
	case *out == "":
		return fmt.Errorf("--out is required")
	}
	fmts, err := analysis.ParseFormats(*formats)
	if err != nil {
		return fmt.Errorf("--format: %w", err)
	}
	dir, err := mf.dir()
	if err != nil {
		return err
	}
	if err := refuseNonEmpty(*out, "retrieval_heads and "+analysis.RetrievalManifestName, *force); err != nil {
		return err
	}
	run := &analysis.RetrievalRun{Dir: dir, Load: mf.loadOptions(), Out: *out, Formats: fmts, Threads: *threads,
		Options: analysis.RetrievalOptions{Segment: *segment, Gap: *gap, Samples: *samples, Seed: *seed, Steps: *steps, Above: *above,
			TileRows: *tile, AllowExtrapolation: *allowExt},
		CLIOptions: cliOptions(fs), Args: append([]string{"retrieval"}, args...)}
	man, rows, err := run.Run()
	if err != nil {
		return err
	}
	var copied, queries int
	for _, s := range man.Samples {
		copied, queries = copied+s.Copied, queries+s.CopyQueries
	}
	fmt.Fprintf(w, "wrote %d head rows to %s (%.1f s): T = %d, the model copied %d of %d copy steps; %d heads score above %g\n",
		len(rows), *out, man.Seconds, man.T, copied, queries, man.HeadsAbove, man.Options.Above)
	top := append([]analysis.RetrievalHeadRow{}, rows...)
	sort.SliceStable(top, func(i, j int) bool { return top[i].Score > top[j].Score })
	for _, r := range top[:min(5, len(top))] {
		if r.Steps > 0 {
			fmt.Fprintf(w, "  layer %d head %d: retrieval score %.3f (%d of %d steps), source mass %.3f\n", r.Layer, r.Head, r.Score, r.Hits, r.Steps, r.SourceMass)
		}
	}
	for _, n := range man.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}
