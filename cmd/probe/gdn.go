package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// GDNOptions are the options of probe gdn.
type GDNOptions struct {
	Stdout       io.Writer
	CLIOptions   []results.Option // every flag with its value, for the manifest
	CommandLine  []string         // the arguments after the command name, for the manifest and the resume note
	Stream       streamFlags
	Innovation   string
	Weights      string
	RWKVDecay    string
	RWKVGain     string
	Lambda       lambdaFlags
	WRows        bool
	NoDispersion bool
	NoWRows      bool
	Tile         int
}

// NewCmdGDN builds probe gdn; runF (nil: runGDN) runs it.
func NewCmdGDN(runF func(*GDNOptions) error) *cobra.Command {
	opts := &GDNOptions{}
	cmd := &cobra.Command{
		Use:     "gdn --model <dir> (--ids <file> | --text <file>) --lengths 4k [--samples N] [--w-rows [--no-dispersion]] [--shard i/n] --out <dir>",
		Short:   "Recurrent mixers (Gated DeltaNet, Mamba-2, RWKV-7) as filters per (layer, value head, token): gain, forgetting, innovation, state norm, and with --w-rows n_eff^W, first-token share, dispersion of the exact effective attention",
		Example: "probe generate --arch qwen3_5 --vocab 2048 --out /tmp/q35 && probe gdn --model /tmp/q35 --text README.md --tokenizer zoo/checkpoints/gated_headwise/tokenizer.json --lengths 256 --out /tmp/gdn",
		Args:    noArgs(""),
		RunE: func(c *cobra.Command, _ []string) error {
			opts.Stdout = c.OutOrStdout()
			opts.CLIOptions, opts.CommandLine = cliOptions(c.Flags()), commandArgs(c)
			return orDefault(runF, runGDN)(opts)
		},
	}
	f := cmd.Flags()
	opts.Stream.registerStream(f, planDefaults{K: 1024, Samples: 1, Disjoint: analysis.DisjointAll, Placement: analysis.PlaceSequential, Seed: 1})
	f.StringVar(&opts.Innovation, "innovation", "decayed", "innovation r_t = v_t − e^{g_t}S_{t−1}ᵀk_t (decayed: the residual the update multiplies by β) or v_t − S_{t−1}ᵀk_t (undecayed)")
	f.StringVar(&opts.RWKVDecay, "rwkv-decay", "geomean", "RWKV-7: the decay column's summary of a head's per-channel decay w_t: geomean ((Π_j w_j)^{1/N}), mean, min or max")
	f.StringVar(&opts.RWKVGain, "rwkv-gain", "removal", "RWKV-7: the beta (gain) column's summary of a head's learning rate a_t: removal (Σ_j κ̂_j² a_j, the fraction erased along the removal key κ̂) or mean (mean_j a_j)")
	f.StringVar(&opts.Weights, "w-weights", "abs", "weights of the dispersion of the values under a W row: abs (|W|/Σ|W|, defined for any non-zero row) or signed (W/ΣW, defined only where every entry has the sign of ΣW)")
	opts.Lambda.registerLambda(f, "") // of λobs^W = (n_eff^W + ν)/(S̄^W + νσ0²), σ0² = 1/d_value by default, and K^W
	f.BoolVar(&opts.WRows, "w-rows", false, "also compute the effective-attention rows' statistics (neff_w, first_share, row_sum, neg_share, S_mean_w, lambda_obs_w, K_w; otherwise empty): O(T²·d_k) per head against the recurrence's O(T·d_k·d_v), several times the forward pass at long T (docs/diagnostics.md)")
	f.BoolVar(&opts.NoDispersion, "no-dispersion", false, "with --w-rows: skip S_mean_w, lambda_obs_w, K_w (their O(t·d_value) per row)")
	f.BoolVar(&opts.NoWRows, "no-w-rows", false, "deprecated: the W rows are off unless --w-rows")
	f.IntVar(&opts.Tile, "tile", 0, "rows per effective-attention tile (0: the model's default)")
	opts.Stream.declareRelations(cmd)
	cmd.MarkFlagsMutuallyExclusive("w-rows", "no-w-rows") // the latter deprecated: the W rows are off by default
	return cmd
}

// runGDN writes the filter quantities of a model's recurrent mixers
// (probes.GDNFilter) per (length, sample, layer, value head, token):
// the table gdn and gdn_manifest.json (docs/diagnostics.md, "Gated
// DeltaNet as a filter").
func runGDN(opts *GDNOptions) error {
	lengths, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	if opts.NoDispersion && !opts.WRows {
		return fmt.Errorf("--no-dispersion applies to the W-row statistics: give it with --w-rows")
	}
	mo := results.GDNOptions{StreamPlan: opts.Stream.plan(lengths),
		Innovation: opts.Innovation, Weights: opts.Weights, RWKVDecay: opts.RWKVDecay, RWKVGain: opts.RWKVGain, Nu: opts.Lambda.Nu, Sigma02: opts.Lambda.Sigma02, Prior: opts.Lambda.Prior, NoDispersion: opts.NoDispersion,
		WRows: opts.WRows, TileRows: opts.Tile}
	spec, end, err := opts.Stream.streamSpec("gdn", "the gdn table and "+results.GDNManifestName, fmts, opts.CLIOptions, opts.CommandLine)
	if err != nil {
		return err
	}
	man, rows, err := (&analysis.GDNRun{RunSpec: spec, Options: mo}).Run()
	end()
	if err != nil {
		if man != nil {
			return opts.Stream.stopped(opts.Stdout, "gdn", opts.CommandLine, &man.RunRecord, err)
		}
		return err
	}
	defer printDeviation(opts.Stdout, man.Deviation) // after the lines on the tables
	if opts.Stream.done(opts.Stdout, &man.RunRecord) {
		return nil
	}
	fmt.Fprintf(opts.Stdout, "wrote %d rows (%d passes × recurrent layers %v × heads × tokens) to %s (%.1f s)\n",
		rows, len(man.Chunks), man.Layers, opts.Stream.Out, man.Seconds)
	return nil
}
