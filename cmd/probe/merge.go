package main

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis"
	flag "github.com/spf13/pflag"
)

func cmdMerge(args []string, w io.Writer) error {
	fs := newFlags("merge")
	out := fs.String("out", "", "output folder (may be one of the shard folders)")
	formats := fs.String("format", "parquet", "table formats: any of parquet,csv,jsonl (shards of probe gdn, sinks or massive: the shards' formats unless given)")
	force := fs.Bool("force", false, "write into an --out that holds other files (not one of the shard folders)")
	af := addAggFlags(fs)
	dirs, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return fmt.Errorf("give the shard folders to merge: probe merge <dir> ... --out <dir>")
	}
	if *out == "" {
		return fmt.Errorf("--out is required")
	}
	fmts, err := analysis.ParseFormats(*formats)
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(dirs, func(d string) bool { return filepath.Clean(d) == filepath.Clean(*out) }) {
		if err := refuseNonEmpty(*out, "the merged tables", *force); err != nil {
			return err
		}
	}
	if kind := analysis.StreamKindOf(dirs[0]); kind != "" {
		// shards of probe gdn, sinks or massive: no aggregation options;
		// the shards' formats unless --format is given
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		for name := range set {
			if name != "out" && name != "format" && name != "force" {
				return fmt.Errorf("--%s is an option of sweep merges; %s holds a probe %s run", name, dirs[0], kind)
			}
		}
		if !set["format"] {
			fmts = nil
		}
		man, err := analysis.MergeStream(dirs, *out, analysis.MergeOptions{Formats: fmts, CLIOptions: cliOptions(fs),
			Args: append([]string{"merge"}, args...)})
		if err != nil {
			return err
		}
		rec := man.Record()
		fmt.Fprintf(w, "merged %d probe %s passes from %d folders into %s: %v\n", len(rec.Passes), kind, len(dirs), *out, rec.Tables)
		return nil
	}
	ms, _, err := analysis.FindManifests(dirs[0])
	if err != nil {
		return err
	}
	agg, err := af.options(ms[0].Analysis, ms[0].Sweep.KUnit, true)
	if err != nil {
		return err
	}
	man, err := analysis.Merge(dirs, *out, analysis.MergeOptions{Formats: fmts, Agg: &agg, CLIOptions: cliOptions(fs),
		Args: append([]string{"merge"}, args...)})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "merged %d passes from %d folders into %s: %v\n", len(man.Passes), len(dirs), *out, man.Tables)
	for _, f := range man.Flags {
		fmt.Fprintf(w, "flagged: %s\n", f)
	}
	return nil
}
