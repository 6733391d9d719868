package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// MergeOptions are the options of probe merge.
type MergeOptions struct {
	cmdIO
	Out     string // the merged folder (may be one of the shards)
	Formats string
	Force   bool
	Agg     aggFlags
}

// flags declares the flags of probe merge into f and their relations.
func (o *MergeOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	f.StringVar(&o.Out, "out", "", "output folder (may be one of the shard folders); for probe diag's shards, the merged CSV file")
	f.StringVar(&o.Formats, "format", "parquet", "table formats: any of parquet,csv,jsonl (shards of probe gdn, sinks, massive, experts, retrieval or ppl: the shards' formats unless given)")
	f.BoolVar(&o.Force, "force", false, "write into an --out that holds other files (not one of the shard folders)")
	o.Agg.registerAgg(f)
	markRequired(cmd, "out", "")
}

// runMerge merges the shard folders opts.Args into opts.Out: a sweep's
// (re-aggregated with the aggregation flags given), or those of a
// measurement on the run engine (analysis.MergeStream).
func runMerge(opts *MergeOptions) error {
	dirs := opts.Args
	if len(dirs) == 0 {
		return fmt.Errorf("give the shard folders to merge: probe merge <dir> ... --out <dir>")
	}
	fmts, err := analysis.ParseFormats(opts.Formats)
	if err != nil {
		return err
	}
	// probe diag's shards and merged run may be named by their CSV files
	dirs = slices.Clone(dirs)
	for i, d := range dirs {
		if analysis.StreamKindOf(analysis.DiagRunDir(d)) == "diag" {
			dirs[i] = analysis.DiagRunDir(d)
		}
	}
	out := opts.Out
	if analysis.StreamKindOf(dirs[0]) == "diag" {
		out = analysis.DiagRunDir(strings.TrimSuffix(out, ".run"))
	}
	if !slices.ContainsFunc(dirs, func(d string) bool { return filepath.Clean(d) == filepath.Clean(out) }) {
		if err := refuseNonEmpty(out, "the merged tables", opts.Force); err != nil {
			return err
		}
	}
	kind := analysis.StreamKindOf(dirs[0])
	mo := analysis.MergeOptions{Formats: fmts, CLIOptions: opts.CLIOptions, Args: append([]string{"merge"}, opts.CommandLine...)}
	if kind == "" || kind == "sweep" {
		// a sweep's tables are aggregated again, with the aggregation flags given
		ms, _, err := analysis.FindManifests(dirs[0])
		if err != nil {
			return err
		}
		agg, err := opts.Agg.options(ms[0].Analysis, ms[0].Sweep.KUnit, true)
		if err != nil {
			return err
		}
		mo.Agg = &agg
	} else {
		// another measurement on the run engine (gdn … ppl): no aggregation options;
		// the shards' formats unless --format is given
		formatSet := false
		for _, o := range opts.CLIOptions {
			switch {
			case !o.Set, o.Name == "out", o.Name == "force":
			case o.Name == "format":
				formatSet = true
			default:
				return fmt.Errorf("--%s is an option of sweep merges; %s holds a probe %s run", o.Name, dirs[0], kind)
			}
		}
		if !formatSet {
			mo.Formats = nil
		}
	}
	man, err := analysis.MergeStream(dirs, out, mo)
	if err != nil {
		return err
	}
	rec := man.Record()
	sw, ok := man.(*results.Manifest)
	if !ok {
		fmt.Fprintf(opts.Stdout, "merged %d probe %s passes from %d folders into %s: %v\n", len(rec.Passes), kind, len(dirs), out, rec.Tables)
		return nil
	}
	fmt.Fprintf(opts.Stdout, "merged %d passes from %d folders into %s: %v\n", len(rec.Passes), len(dirs), opts.Out, rec.Tables)
	for _, f := range sw.Flags {
		fmt.Fprintf(opts.Stdout, "flagged: %s\n", f)
	}
	return nil
}
