package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// GDNOptions are the options of probe gdn.
type GDNOptions struct {
	cmdIO
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

// flags declares the flags of probe gdn into f and their relations.
func (o *GDNOptions) flags(cmd *cobra.Command, f *pflag.FlagSet) {
	o.Stream.registerStream(f, planDefaults{K: 1024, Samples: 1, Disjoint: analysis.DisjointAll, Placement: analysis.PlaceSequential, Seed: 1})
	f.StringVar(&o.Innovation, "innovation", "decayed", "innovation r_t = v_t − e^{g_t}S_{t−1}ᵀk_t (decayed: the residual the update multiplies by β) or v_t − S_{t−1}ᵀk_t (undecayed)")
	f.StringVar(&o.RWKVDecay, "rwkv-decay", "geomean", "RWKV-7: the decay column's summary of a head's per-channel decay w_t: geomean ((Π_j w_j)^{1/N}), mean, min or max")
	f.StringVar(&o.RWKVGain, "rwkv-gain", "removal", "RWKV-7: the beta (gain) column's summary of a head's learning rate a_t: removal (Σ_j κ̂_j² a_j, the fraction erased along the removal key κ̂) or mean (mean_j a_j)")
	f.StringVar(&o.Weights, "w-weights", "abs", "weights of the dispersion of the values under a W row: abs (|W|/Σ|W|, defined for any non-zero row) or signed (W/ΣW, defined only where every entry has the sign of ΣW)")
	o.Lambda.registerLambda(f, "") // of λobs^W = (n_eff^W + ν)/(S̄^W + νσ0²), σ0² = 1/d_value by default, and K^W
	f.BoolVar(&o.WRows, "w-rows", false, "also compute the effective-attention rows' statistics (neff_w, first_share, row_sum, neg_share, S_mean_w, lambda_obs_w, K_w; otherwise empty): O(T²·d_k) per head against the recurrence's O(T·d_k·d_v), several times the forward pass at long T (docs/diagnostics.md)")
	f.BoolVar(&o.NoDispersion, "no-dispersion", false, "with --w-rows: skip S_mean_w, lambda_obs_w, K_w (their O(t·d_value) per row)")
	f.BoolVar(&o.NoWRows, "no-w-rows", false, "deprecated: the W rows are off unless --w-rows")
	f.IntVar(&o.Tile, "tile", 0, "rows per effective-attention tile (0: the model's default)")
	o.Stream.declareRelations(cmd)
	cmd.MarkFlagsMutuallyExclusive("w-rows", "no-w-rows") // the latter deprecated: the W rows are off by default
}

// runGDN writes the filter quantities of a model's recurrent mixers
// (probes.GDNFilter) per (length, sample, layer, value head, token):
// the table gdn and gdn_manifest.json (docs/diagnostics.md, "Gated
// DeltaNet as a filter").
func runGDN(opts *GDNOptions) error {
	plan, fmts, err := opts.Stream.validate()
	if err != nil {
		return err
	}
	if opts.NoDispersion && !opts.WRows {
		return fmt.Errorf("--no-dispersion applies to the W-row statistics: give it with --w-rows")
	}
	mo := results.GDNOptions{StreamPlan: plan,
		Innovation: opts.Innovation, Weights: opts.Weights, RWKVDecay: opts.RWKVDecay, RWKVGain: opts.RWKVGain, Nu: opts.Lambda.Nu, Sigma02: opts.Lambda.Sigma02, Prior: opts.Lambda.Prior, NoDispersion: opts.NoDispersion,
		WRows: opts.WRows, TileRows: opts.Tile}
	spec, run, err := opts.Stream.streamSpec("gdn", "the gdn table and "+results.GDNManifestName, fmts, &opts.cmdIO)
	if err != nil {
		return err
	}
	man, rows, err := (&analysis.GDNRun{RunSpec: spec, Options: mo}).Run()
	return finish(run, man, err, func() error {
		fmt.Fprintf(opts.Stdout, "wrote %d rows (%d passes × recurrent layers %v × heads × tokens) to %s (%.1f s)\n",
			rows, len(man.Chunks), man.Layers, opts.Stream.Out, man.Seconds)
		return nil
	})
}
