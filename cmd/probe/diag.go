package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// DiagOptions are the options of probe diag: runFlags (whose Out is the
// CSV file; its run folder is analysis.DiagRunDir of it), the batch and
// the diagnostics' options.
type DiagOptions struct {
	cmdIO
	runFlags
	Input              tokenFlags
	AllowExtrapolation bool
	OnNonFinite        string
	WithTokens, Legacy bool
	Kernel, SinkRows   string
}

// flags declares the flags of probe diag into f and their relations.
func (o *DiagOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	o.Model.registerModel(f, "checkpoint")
	o.Input.registerInput(f, true)
	f.StringVar(&o.Out, "out", "", "output CSV file; its run folder <out>.run keeps one pass file per sample, so that re-running resumes")
	extrapolationVar(f, &o.AllowExtrapolation)
	threadsVar(f, &o.Threads)
	shardVar(f, &o.Shard)
	f.BoolVar(&o.Force, "force", false, "replace a CSV that has no run folder (written before probe diag kept one), or a run of another plan")
	f.StringVar(&o.OnNonFinite, "on-nonfinite", analysis.NonFiniteStop, "NaN/Inf in attention rows: stop, or flag (write NaN and report)")
	f.BoolVar(&o.WithTokens, "tokens", false, "add a last column, token: the text of each query's token (needs the model folder's tokenizer.json or --tokenizer)")
	f.BoolVar(&o.Legacy, "legacy-names", false, "write the CSV header of earlier releases (s_mean, k_bft, k_dim_mean for S_mean, K, K_dim_mean); kept for one release")
	f.StringVar(&o.SinkRows, "sink-rows", probes.RenormRows.String(), "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in a sink_mass column after bos_mass) or raw (as the model returns them); docs/diagnostics.md")
	f.StringVar(&o.Kernel, "kernel", "matrix", "where the row moments come from: matrix (the attention pass's matrix products, guarded) or rows (each row walked twice); see probes.Kernel")
	progressVar(f, &o.Progress)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markExactlyOne(cmd, "ids", "text")
}

// runDiag runs one forward pass per sample of the batch with every App. I
// diagnostic on the softmax layers (analysis.DiagRun) and writes them per
// (sample, layer, head, query) as CSV, with the deviation from float32
// under --compute bf16.
func runDiag(opts *DiagOptions) error {
	run := opts.runFlags // its run folder beside the CSV file
	run.Out = analysis.DiagRunDir(opts.Out)
	var err error
	if run.sh, err = results.ParseShard(run.Shard); err != nil {
		return fmt.Errorf("--shard: %w", err)
	}
	dir, cfg, err := opts.Model.loadConfig()
	if err != nil {
		return err
	}
	ids, err := opts.Input.checkedBatch(dir, cfg, opts.AllowExtrapolation)
	if err != nil {
		return err
	}
	var toks [][]string
	if opts.WithTokens {
		if toks, err = tokenStrings(dir, opts.Input.Tokenizer, ids); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	spec, er, err := run.spec("diag", "probe diag's passes and manifest", []string{analysis.FormatCSV}, &opts.cmdIO)
	if err != nil {
		return err
	}
	spec.Dir, spec.Source = dir, diagSource(opts.Input, ids)
	r := &analysis.DiagRun{RunSpec: spec, IDs: ids, Tokens: toks, Options: analysis.DiagOptions{OnNonFinite: opts.OnNonFinite,
		Kernel: opts.Kernel, SinkRows: opts.SinkRows, AllowExtrapolation: opts.AllowExtrapolation, Tokens: opts.WithTokens, LegacyNames: opts.Legacy}}
	man, err := r.Run()
	er.end()
	if err != nil {
		if man != nil {
			return run.stopped(opts.Stdout, "diag", opts.CommandLine, &man.RunRecord, err)
		}
		return err
	}
	defer reportDiag(opts.Stdout, man, cfg)
	if run.done(opts.Stdout, &man.RunRecord) {
		return nil
	}
	B, T := len(ids), len(ids[0])
	fmt.Fprintf(opts.Stdout, "wrote %d rows (%d samples × %d layers × %d heads × %d queries) to %s\n", man.Rows, B,
		len(man.Layers), cfg.Heads, T, opts.Out)
	return nil
}

// reportDiag prints what a diag run measured beyond its rows: the layers
// it left out, the reading of learned sinks, the bf16 deviation and the
// flagged rows.
func reportDiag(w io.Writer, man *analysis.DiagManifest, c *model.Config) {
	if len(man.Layers) < c.Layers {
		kinds := c.LayerKinds()
		for _, l := range man.Layers {
			kinds[l] = ""
		}
		other := slices.Compact(slices.DeleteFunc(kinds, func(k string) bool { return k == "" }))
		fmt.Fprintf(w, "measured the softmax layers %v; the others (%s) have no softmax rows\n", man.Layers, strings.Join(other, "; "))
	}
	if man.Model.Sinks {
		fmt.Fprintf(w, "learned attention sinks: the diagnostics read the rows %s (--sink-rows); sink_mass is the dropped sink column's weight\n", man.Options.SinkRows)
	}
	printDeviation(w, man.Deviation)
	for _, f := range man.Flags {
		fmt.Fprintf(w, "flagged: %s\n", f)
	}
}

// diagSource describes probe diag's input: the file, and the token digest
// of the batch's sequences back to back.
func diagSource(in tokenFlags, ids [][]int) results.SourceInfo {
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: inputName(in.IDs)}}
	if in.Text != "" {
		src = results.SourceInfo{Kind: "text", File: results.FileHash{Path: inputName(in.Text)}, AddSpecialTokens: true}
	}
	stream := slices.Concat(ids...)
	src.Tokens, src.Digest = len(stream), analysis.TokenDigest(stream)
	return src
}
