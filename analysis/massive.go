package analysis

import (
	"cmp"
	"fmt"
	"maps"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// DefaultMassiveOptions are the command's defaults.
func DefaultMassiveOptions() results.MassiveOptions {
	return results.MassiveOptions{StreamPlan: defaultStreamPlan, TopK: 10,
		Interventions: []string{results.MassiveZero, results.MassiveMean}, Layer: -1}
}

// MassiveRun is one `probe massive` run: the plain pass and the
// interventions of each chunk, one pass file per table and chunk in
// Out/passes, then massive_top, massive_ppl and massive_manifest.json. It
// resumes and shards as GDNRun does.
type MassiveRun struct {
	RunSpec
	Options results.MassiveOptions
}

// Run runs the passes and, unsharded, writes massive_top, massive_ppl and
// the manifest, returning the rows of both (none for a shard).
func (r *MassiveRun) Run() (*results.MassiveManifest, []results.MassiveTopRow, []results.MassivePPLRow, error) {
	o := &r.Options
	if o.TopK < 1 {
		return nil, nil, nil, fmt.Errorf("top-k %d: want at least 1", o.TopK)
	}
	o.Entries = cmp.Or(o.Entries, o.TopK)
	if o.Entries < 1 || o.Entries > o.TopK {
		return nil, nil, nil, fmt.Errorf("entries %d: want 1 … top-k (%d)", o.Entries, o.TopK)
	}
	for _, iv := range o.Interventions {
		if iv != results.MassiveZero && iv != results.MassiveMean {
			return nil, nil, nil, fmt.Errorf("intervention %q: want %s or %s", iv, results.MassiveZero, results.MassiveMean)
		}
	}
	m, rec, err := r.open("massive", o.StreamPlan, 1)
	if err != nil {
		return nil, nil, nil, err
	}
	c := &m.Config
	if o.Layer >= c.Layers {
		return nil, nil, nil, fmt.Errorf("layer %d: the model has %d layers (0 … %d; −1 picks the layer with the largest ratio)", o.Layer, c.Layers, c.Layers-1)
	}
	man := &results.MassiveManifest{RunRecord: rec, Options: *o}
	man.Conventions = maps.Clone(massiveConventions)
	return runRows(&r.RunSpec, man, man.Options, m, &massiveMeasure{MassiveRun: r, m: m, man: man})
}

// massiveMeasure is probe massive's measurement: per chunk the plain pass
// (MassiveHooks) and one pass per intervention, whose massive_top and
// massive_ppl tables finishMassive writes.
type massiveMeasure struct {
	*MassiveRun
	m   *model.Model
	man *results.MassiveManifest
	finishedRows[results.MassiveTopRow, results.MassivePPLRow]
}

func (r *massiveMeasure) tables() []string { return massiveTables }
func (r *massiveMeasure) forwards() int    { return 1 + len(r.Options.Interventions) }

func (r *massiveMeasure) pass(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	o, c := &r.Options, &r.m.Config
	D := c.DModel
	T := ch.T
	ids := [][]int{r.Stream[ch.Start : ch.End-1]}
	targets := r.Stream[ch.Start+1 : ch.End]
	var nllSum float64 // of the pass that runs, from its logits' row blocks
	opt := model.Options{AllowExtrapolation: o.AllowExtrapolation, Threads: r.Threads, LogitRows: nllRows(&nllSum, r.m.Vocab, targets)}

	// plain pass: top entries and median of every layer
	hs := &hooks.Set{}
	top, med := MassiveHooks(hs, c, T, o.TopK)
	watch(hs)
	opt.Hooks = hs
	if _, err := r.m.Forward(ids, opt); err != nil {
		return nil, err
	}
	base := nllSum / float64(len(targets))
	var tops []results.MassiveTopRow
	ppls := []results.MassivePPLRow{{T: T, Sample: ch.Sample, Intervention: "none", Layer: -1, Tokens: T, NLL: base, PPL: math.Exp(base)}}
	layer, best := o.Layer, -1.0
	for l := 0; l < c.Layers; l++ {
		for k, a := range top[l] {
			ratio := math.Abs(float64(a.Value)) / med[l]
			tops = append(tops, results.MassiveTopRow{T: T, Sample: ch.Sample, Layer: l, Rank: k, Position: a.Position, Channel: a.Channel,
				Value: float64(a.Value), MedianAbs: med[l], Ratio: ratio})
			if k == 0 && o.Layer < 0 && ratio > best {
				layer, best = l, ratio
			}
		}
	}
	entries := top[layer][:min(o.Entries, len(top[layer]))]
	for _, iv := range o.Interventions {
		hs := &hooks.Set{}
		hs.Add(hooks.Name(hooks.ResidPost, layer), func(_ string, _ int, x *tensor.Dense) error {
			h := x.Data().([]float32)
			var means []float64
			if iv == results.MassiveMean {
				means = make([]float64, D)
				probes.ChannelMeans(means, h, T, D)
			}
			probes.ReplaceEntries(h, D, entries, means)
			return nil
		})
		watch(hs)
		opt.Hooks = hs
		nllSum = 0
		if _, err := r.m.Forward(ids, opt); err != nil {
			return nil, fmt.Errorf("intervention %s at layer %d: %w", iv, layer, err)
		}
		nll := nllSum / float64(len(targets))
		ppls = append(ppls, results.MassivePPLRow{T: T, Sample: ch.Sample, Intervention: iv, Layer: layer, Entries: len(entries),
			Tokens: T, NLL: nll, PPL: math.Exp(nll), DNLL: nll - base})
	}
	return []passTable{tableOf("massive_top", tops), tableOf("massive_ppl", ppls)}, nil
}

func (r *massiveMeasure) finish() error { return r.keep(finishMassive(r.Out, r.man)) }

// MassiveHooks registers on hs what probe massive attaches to its plain
// length-T pass of a model with configuration c: per layer the topK
// largest |residual| entries (probes.TopAbs) and the exact median |h|
// (probes.MedianAbs) at blocks.{l}.hook_resid_post, which fill top and med
// as the pass runs (probe bench measures it; the interventions are further
// forward passes).
func MassiveHooks(hs *hooks.Set, c *model.Config, T, topK int) (top [][]probes.Activation, med []float64) {
	top, med = make([][]probes.Activation, c.Layers), make([]float64, c.Layers)
	var scratch []float32
	hs.Add(hooks.ResidPost, func(_ string, l int, x *tensor.Dense) error {
		h := x.Data().([]float32)
		top[l] = probes.TopAbs(h, T, c.DModel, topK)
		med[l], scratch = probes.MedianAbs(h, scratch)
		return nil
	})
	return top, med
}

// massiveTables are the tables of a massive pass.
var massiveTables = []string{"massive_top", "massive_ppl"}

// finishMassive writes massive_top and massive_ppl from the pass files of
// every chunk of man in dir.
func finishMassive(dir string, man *results.MassiveManifest) ([]results.MassiveTopRow, []results.MassivePPLRow, error) {
	var tops []results.MassiveTopRow
	var ppls []results.MassivePPLRow
	for _, c := range man.Chunks {
		top, err := readPassRows[results.MassiveTopRow](dir, "massive_top", man, man.Options, c)
		if err != nil {
			return nil, nil, err
		}
		ppl, err := readPassRows[results.MassivePPLRow](dir, "massive_ppl", man, man.Options, c)
		if err != nil {
			return nil, nil, err
		}
		tops, ppls = append(tops, top...), append(ppls, ppl...)
	}
	return tops, ppls, writeTables(man.Record(), dir, tableOf("massive_top", tops), tableOf("massive_ppl", ppls))
}

// nllRows returns a model.Options.LogitRows that adds the TokenNLL of
// each row of logits (of V values) against its target to *sum, in row
// order: the pass then needs no [T, V] logits.
func nllRows(sum *float64, V int, targets []int) func(int, []float32) {
	var row []float64
	return func(first int, z []float32) {
		row = TokenNLL(row[:0], z, V, targets[first:first+len(z)/V])
		for _, x := range row {
			*sum += x
		}
	}
}

// massiveConventions states the definitions behind the massive tables; Run
// records a copy in each manifest.
var massiveConventions = map[string]string{
	"activation":   "blocks.{l}.hook_resid_post, the residual stream leaving block l, batch 1",
	"top":          "the top_k entries by |h[t,i]| (ties: earlier position, then earlier channel), ratio = |h| / median over all T x d_model entries of |h| (exact)",
	"massive":      "Sun et al. 2024 call an entry massive when |h| > 100 and about 1000 x the median; the table reports the top entries, whatever their size",
	"intervention": "a second pass with the top `entries` entries of `layer` (default: the layer with the largest top-1 ratio in that pass) set to 0 (zero) or to their channel's mean over the pass's positions (mean, computed from the live activation at that layer); later layers see the change",
	"nll":          "mean over the T predicted tokens of logsumexp(z_t) - z_t[x_{t+1}] in float64; ppl = exp(nll); d_nll = nll - nll(none) on the same chunk",
}
