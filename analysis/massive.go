package analysis

import (
	"fmt"
	"math"

	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// Interventions on massive activations (MassiveOptions.Interventions).
const (
	MassiveZero = "zero" // Sun et al.: set the entries to 0
	MassiveMean = "mean" // control: set each entry to its channel's mean over the pass's positions
)

// MassiveTopRow is one row of the massive_top table: the rank-th largest
// |h[t, i]| of layer l's residual stream (blocks.{l}.hook_resid_post) in one
// pass, against the layer's median |h|.
type MassiveTopRow struct {
	T         int     `parquet:"T"`
	Sample    int     `parquet:"sample"`
	Layer     int     `parquet:"layer"`
	Rank      int     `parquet:"rank"`
	Position  int     `parquet:"position"`
	Channel   int     `parquet:"channel"`
	Value     float64 `parquet:"value"`
	MedianAbs float64 `parquet:"median_abs"`
	Ratio     float64 `parquet:"ratio"` // |value| / median_abs
}

// MassivePPLRow is one row of the massive_ppl table: the mean NLL of one
// pass with the top entries of one layer replaced (or none).
type MassivePPLRow struct {
	T            int     `parquet:"T"`
	Sample       int     `parquet:"sample"`
	Intervention string  `parquet:"intervention"` // "none", "zero" or "mean"
	Layer        int     `parquet:"layer"`        // the layer intervened on (−1 for none)
	Entries      int     `parquet:"entries"`      // entries replaced
	Tokens       int     `parquet:"tokens"`       // predicted tokens
	NLL          float64 `parquet:"nll"`
	PPL          float64 `parquet:"ppl"`
	DNLL         float64 `parquet:"d_nll"` // NLL − NLL of none, same chunk
}

// MassiveOptions are the options of a massive run, recorded in its
// manifest. A chunk holds T + 1 stream tokens: position t predicts x_{t+1}.
type MassiveOptions struct {
	StreamPlan
	// TopK entries per layer are reported.
	TopK int `json:"top_k"`
	// Interventions run after the plain pass, each its own pass.
	Interventions []string `json:"interventions"`
	// Layer is the layer whose top Entries entries are replaced (−1: in
	// each pass the layer with the largest top-1 ratio to its median).
	Layer   int `json:"layer"`
	Entries int `json:"entries"` // 0: TopK
}

// DefaultMassiveOptions are the command's defaults.
func DefaultMassiveOptions() MassiveOptions {
	return MassiveOptions{StreamPlan: defaultStreamPlan, TopK: 10,
		Interventions: []string{MassiveZero, MassiveMean}, Layer: -1}
}

// MassiveManifest records a massive run (or one shard of it). Its chunks'
// Start, End cover the T + 1 tokens of each chunk.
type MassiveManifest struct {
	RunRecord
	Options MassiveOptions `json:"massive"`
}

// MassiveManifestName is the manifest's file name in an unsharded massive
// run's folder (StreamManifestName for a shard's).
const MassiveManifestName = "massive_manifest.json"

// MassiveRun is one `probe massive` run: the plain pass and the
// interventions of each chunk, one pass file per table and chunk in
// Out/passes, then massive_top, massive_ppl and massive_manifest.json. It
// resumes and shards as GDNRun does.
type MassiveRun struct {
	RunSpec
	Options MassiveOptions
}

// Run runs the passes and, unsharded, writes massive_top, massive_ppl and
// the manifest, returning the rows of both (none for a shard).
func (r *MassiveRun) Run() (*MassiveManifest, []MassiveTopRow, []MassivePPLRow, error) {
	o := &r.Options
	if o.TopK < 1 {
		return nil, nil, nil, fmt.Errorf("top-k %d: want at least 1", o.TopK)
	}
	if o.Entries == 0 {
		o.Entries = o.TopK
	}
	if o.Entries < 1 || o.Entries > o.TopK {
		return nil, nil, nil, fmt.Errorf("entries %d: want 1 … top-k (%d)", o.Entries, o.TopK)
	}
	for _, iv := range o.Interventions {
		if iv != MassiveZero && iv != MassiveMean {
			return nil, nil, nil, fmt.Errorf("intervention %q: want %s or %s", iv, MassiveZero, MassiveMean)
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
	man := &MassiveManifest{RunRecord: rec, Options: *o}
	man.Conventions = massiveConventions()
	D := c.DModel
	var tops []MassiveTopRow
	var ppls []MassivePPLRow
	err = runStream(man, streamRun{RunSpec: &r.RunSpec, tables: massiveTables, opts: man.Options, model: m, forwards: 1 + len(o.Interventions),
		pass: func(ch Chunk, watch func(*hooks.Set)) ([]passTable, error) {
			T := ch.T
			ids := [][]int{r.Stream[ch.Start : ch.End-1]}
			targets := r.Stream[ch.Start+1 : ch.End]
			var nllSum float64 // of the pass that runs, from its logits' row blocks
			opt := model.Options{AllowExtrapolation: o.AllowExtrapolation, Threads: man.Threads, LogitRows: nllRows(&nllSum, m.Vocab, targets)}

			// plain pass: top entries and median of every layer
			hs := &hooks.Set{}
			top, med := MassiveHooks(hs, c, T, o.TopK)
			watch(hs)
			opt.Hooks = hs
			if _, err := m.Forward(ids, opt); err != nil {
				return nil, err
			}
			base := nllSum / float64(len(targets))
			var tops []MassiveTopRow
			ppls := []MassivePPLRow{{T: T, Sample: ch.Sample, Intervention: "none", Layer: -1, Tokens: T, NLL: base, PPL: math.Exp(base)}}
			layer, best := o.Layer, -1.0
			for l := 0; l < c.Layers; l++ {
				for k, a := range top[l] {
					ratio := math.Abs(float64(a.Value)) / med[l]
					tops = append(tops, MassiveTopRow{T: T, Sample: ch.Sample, Layer: l, Rank: k, Position: a.Position, Channel: a.Channel,
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
					if iv == MassiveMean {
						means = make([]float64, D)
						probes.ChannelMeans(means, h, T, D)
					}
					probes.ReplaceEntries(h, D, entries, means)
					return nil
				})
				watch(hs)
				opt.Hooks = hs
				nllSum = 0
				if _, err := m.Forward(ids, opt); err != nil {
					return nil, fmt.Errorf("intervention %s at layer %d: %w", iv, layer, err)
				}
				nll := nllSum / float64(len(targets))
				ppls = append(ppls, MassivePPLRow{T: T, Sample: ch.Sample, Intervention: iv, Layer: layer, Entries: len(entries),
					Tokens: T, NLL: nll, PPL: math.Exp(nll), DNLL: nll - base})
			}
			return []passTable{tableOf("massive_top", tops), tableOf("massive_ppl", ppls)}, nil
		},
		finish: func() (err error) { tops, ppls, err = finishMassive(r.Out, man); return err }})
	if err != nil {
		return man, nil, nil, err
	}
	return man, tops, ppls, nil
}

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
func finishMassive(dir string, man *MassiveManifest) ([]MassiveTopRow, []MassivePPLRow, error) {
	var tops []MassiveTopRow
	var ppls []MassivePPLRow
	for _, c := range man.Chunks {
		top, err := readPassRows[MassiveTopRow](dir, "massive_top", man, man.Options, c)
		if err != nil {
			return nil, nil, err
		}
		ppl, err := readPassRows[MassivePPLRow](dir, "massive_ppl", man, man.Options, c)
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

// massiveConventions states the definitions behind the massive tables.
func massiveConventions() map[string]string {
	return map[string]string{
		"activation":   "blocks.{l}.hook_resid_post, the residual stream leaving block l, batch 1",
		"top":          "the top_k entries by |h[t,i]| (ties: earlier position, then earlier channel), ratio = |h| / median over all T x d_model entries of |h| (exact)",
		"massive":      "Sun et al. 2024 call an entry massive when |h| > 100 and about 1000 x the median; the table reports the top entries, whatever their size",
		"intervention": "a second pass with the top `entries` entries of `layer` (default: the layer with the largest top-1 ratio in that pass) set to 0 (zero) or to their channel's mean over the pass's positions (mean, computed from the live activation at that layer); later layers see the change",
		"nll":          "mean over the T predicted tokens of logsumexp(z_t) - z_t[x_{t+1}] in float64; ppl = exp(nll); d_nll = nll - nll(none) on the same chunk",
	}
}
