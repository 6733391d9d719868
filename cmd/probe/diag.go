package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// DiagOptions are the options of probe diag.
type DiagOptions struct {
	Stdout             io.Writer
	Model              modelFlag
	Input              tokenFlags
	Out                string
	AllowExtrapolation bool
	Threads            int
	OnNonFinite        string
	WithTokens         bool
	Legacy             bool
	Kernel             string
	SinkRows           string
	Progress           bool
}

// NewCmdDiag builds probe diag; runF (nil: runDiag) runs it.
func NewCmdDiag(runF func(*DiagOptions) error) *cobra.Command {
	opts := &DiagOptions{}
	cmd := &cobra.Command{
		Use:     "diag --model <dir|org/name> (--ids <file> | --text <file> [--max-tokens N]) --out <file.csv>",
		Short:   "per-(sample, layer, head, query) filter diagnostics of one batch as CSV",
		Example: "probe diag --model zoo/checkpoints/gated_headwise --text README.md --max-tokens 128 --out diag.csv",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			return orDefault(runF, runDiag)(opts)
		},
	}
	f := cmd.Flags()
	opts.Model.registerModel(f, "checkpoint")
	opts.Input.registerInput(f, true)
	f.StringVar(&opts.Out, "out", "", "output CSV file")
	extrapolationVar(f, &opts.AllowExtrapolation)
	threadsVar(f, &opts.Threads)
	f.StringVar(&opts.OnNonFinite, "on-nonfinite", analysis.NonFiniteStop, "NaN/Inf in attention rows: stop, or flag (write NaN and report)")
	f.BoolVar(&opts.WithTokens, "tokens", false, "add a last column, token: the text of each query's token (needs the model folder's tokenizer.json or --tokenizer)")
	f.BoolVar(&opts.Legacy, "legacy-names", false, "write the CSV header of earlier releases (s_mean, k_bft, k_dim_mean for S_mean, K, K_dim_mean); kept for one release")
	f.StringVar(&opts.SinkRows, "sink-rows", probes.RenormRows.String(), "models with learned attention sinks (gpt-oss), whose rows sum to 1 − σ: the rows every diagnostic reads, renorm (divided by their own sum; σ in a sink_mass column after bos_mass) or raw (as the model returns them); docs/diagnostics.md")
	f.StringVar(&opts.Kernel, "kernel", "matrix", "where the row moments come from: matrix (the attention pass's matrix products, guarded) or rows (each row walked twice); see probes.Kernel")
	progressVar(f, &opts.Progress)
	markRequired(cmd, "model", modelHint)
	markRequired(cmd, "out", "")
	markExactlyOne(cmd, "ids", "text")
	return cmd
}

// runDiag runs one forward pass of the batch with every App. I diagnostic
// on the softmax layers (analysis.Diagnose) and writes them per (sample,
// layer, head, query) as CSV, with the deviation from float32 under
// --compute bf16.
func runDiag(opts *DiagOptions) error {
	dir, err := opts.Model.dir()
	if err != nil {
		return err
	}
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		return err
	}
	ids, err := opts.Input.batch(dir)
	if err != nil {
		return err
	}
	if err := checkLength(len(ids[0]), cfg, &opts.Input, opts.AllowExtrapolation); err != nil {
		return err
	}
	var toks [][]string
	if opts.WithTokens {
		if toks, err = tokenStrings(dir, opts.Input.Tokenizer, ids); err != nil {
			return fmt.Errorf("--tokens: %w", err)
		}
	}
	m, err := model.Load(dir, opts.Model.loadOptions())
	if err != nil {
		return err
	}
	B, T, c := len(ids), len(ids[0]), &m.Config
	do := analysis.DiagOptions{OnNonFinite: opts.OnNonFinite, Kernel: opts.Kernel, SinkRows: opts.SinkRows,
		AllowExtrapolation: opts.AllowExtrapolation, Threads: opts.Threads}
	if opts.Progress {
		do.Watch = func(hs *hooks.Set) func(error) { return passProgress(hs, c.Layers, T) }
	}
	d, err := analysis.Diagnose(m, ids, do)
	if err != nil {
		return err
	}
	if err := d.WriteCSV(opts.Out, toks, opts.Legacy); err != nil {
		return err
	}
	fmt.Fprintf(opts.Stdout, "wrote %d rows (%d samples × %d layers × %d heads × %d queries) to %s\n", B*len(d.Layers)*c.Heads*T, B,
		len(d.Layers), c.Heads, T, opts.Out)
	if len(d.Layers) < c.Layers {
		kinds := c.LayerKinds()
		for _, l := range d.Layers {
			kinds[l] = ""
		}
		other := slices.Compact(slices.DeleteFunc(kinds, func(k string) bool { return k == "" }))
		fmt.Fprintf(opts.Stdout, "measured the softmax layers %v; the others (%s) have no softmax rows\n", d.Layers, strings.Join(other, "; "))
	}
	if d.Sinks {
		fmt.Fprintf(opts.Stdout, "learned attention sinks: the diagnostics read the rows %s (--sink-rows); sink_mass is the dropped sink column's weight\n", d.Options.SinkRows)
	}
	if _, err := opts.Model.deviation(opts.Stdout, m, ids, d.Options, opts.AllowExtrapolation, opts.Threads); err != nil {
		return err
	}
	if nf, ok := d.Collector.FirstNonFinite(); ok {
		fmt.Fprintf(opts.Stdout, "flagged: %d attention rows with non-finite inputs, first %s\n", d.Collector.NonFiniteRows(), nf.Error())
		if d.ForwardErr != nil {
			fmt.Fprintf(opts.Stdout, "flagged: the forward pass stopped early (%v); unreached layers are NaN\n", d.ForwardErr)
		}
	}
	return nil
}
