package analysis

import (
	"cmp"
	"fmt"
	"maps"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
)

// DefaultExpertsRunOptions are the command's defaults.
func DefaultExpertsRunOptions() results.ExpertsRunOptions {
	return results.ExpertsRunOptions{StreamPlan: defaultStreamPlan, Margin: results.MarginProb}
}

// expertsTables are the tables of an experts pass: the sums of one
// sequence, from which experts_load and experts_layers are written.
var expertsTables = []string{"experts_sums"}

// ExpertsRun is one `probe experts` run: one pass file of routing sums
// (ExpertSumRow) per chunk in Out/passes, then experts_load,
// experts_layers (ExpertRows of the sums pooled per length) and
// experts_manifest.json. It resumes and shards as GDNRun does.
type ExpertsRun struct {
	RunSpec
	Options results.ExpertsRunOptions
}

// Run runs the passes and, unsharded, writes experts_load, experts_layers
// and the manifest, returning the rows of both (none for a shard). A model
// without a mixture-of-experts layer is refused, naming it.
func (r *ExpertsRun) Run() (*results.ExpertsManifest, []results.ExpertLoadRow, []results.ExpertLayerRow, error) {
	o := &r.Options
	o.Margin = cmp.Or(o.Margin, results.MarginProb)
	if o.Margin != results.MarginProb && o.Margin != results.MarginLogit {
		return nil, nil, nil, fmt.Errorf("margin %q: want %s or %s", o.Margin, results.MarginProb, results.MarginLogit)
	}
	m, rec, err := r.open("experts", o.StreamPlan, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	c := &m.Config
	if c.MoE == nil {
		return nil, nil, nil, fmt.Errorf("%s (%s) has no mixture-of-experts layer: probe experts measures the router of a sparse model (mixtral, qwen3_moe, olmoe, gpt_oss)", r.Dir, c.Arch)
	}
	man := &results.ExpertsManifest{RunRecord: rec, Experts: c.MoE.Experts, TopK: c.MoE.TopK, Options: *o}
	man.Conventions = maps.Clone(expertsConventions)
	return runRows(&r.RunSpec, man, man.Options, m, &expertsMeasure{ExpertsRun: r, m: m, man: man})
}

// expertsMeasure is probe experts' measurement: one experts_sums table
// per chunk (expertSumHooks), then experts_load and experts_layers
// (finishExperts).
type expertsMeasure struct {
	*ExpertsRun
	m   *model.Model
	man *results.ExpertsManifest
	finishedRows[results.ExpertLoadRow, results.ExpertLayerRow]
}

func (e *expertsMeasure) tables() []string { return expertsTables }

func (e *expertsMeasure) finish() error { return e.keep(finishExperts(e.Out, e.man)) }

func (e *expertsMeasure) pass(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	hs := &hooks.Set{}
	sums, err := expertSumHooks(hs, &e.m.Config, e.Options.Margin, nil, nil)
	if err != nil {
		return nil, err
	}
	watch(hs)
	ids := [][]int{e.Stream[ch.Start:ch.End]}
	if _, err := e.m.Forward(ids, model.Options{Hooks: hs, AllowExtrapolation: e.Options.AllowExtrapolation, Threads: e.Threads}); err != nil {
		return nil, err
	}
	rows := sums()
	for i := range rows {
		rows[i].Sample = ch.Sample
	}
	return []passTable{tableOf("experts_sums", rows)}, nil
}

// finishExperts writes experts_load and experts_layers from the pass files
// of every chunk of man in dir: the sums pooled per length over samples.
func finishExperts(dir string, man *results.ExpertsManifest) ([]results.ExpertLoadRow, []results.ExpertLayerRow, error) {
	var sums []ExpertSumRow
	for _, c := range man.Chunks {
		pass, err := readPassRows[ExpertSumRow](dir, "experts_sums", man, man.Options, c)
		if err != nil {
			return nil, nil, err
		}
		sums = append(sums, pass...)
	}
	loads, layers := ExpertRows(PoolExpertSums(sums))
	return loads, layers, writeTables(man.Record(), dir, tableOf("experts_load", loads), tableOf("experts_layers", layers))
}

// expertsConventions states the definitions behind the experts tables; Run
// records a copy in each manifest.
var expertsConventions = map[string]string{
	"routing":     "blocks.{l}.mlp.hook_router_logits z [batch, pos, E] and hook_expert_indices / hook_expert_weights [batch, pos, k] of every sparse layer, batch 1, one sequence per pass",
	"load":        "assignments / (N*k) over the N tokens of every sample of the length; first_load over the S position-0 tokens (S*k assignments), rest_load over the others; each sums to 1 over the experts",
	"mean_weight": "mean routing weight the expert received when chosen (the weights the layer multiplies its output by); NaN for an expert never chosen",
	"top1":        "top-1 expert = argmax of p = softmax(z) over all E experts (lowest index on ties); first_top1 / rest_top1 = share of the position-0 tokens / other tokens whose top-1 it is; first_top1_mode = the expert most position-0 tokens pick, first_top1_agree its share of them, rest_top1_agree its share of the other tokens",
	"entropy":     "H = -sum_e p_e ln p_e in nats (<= ln E), mean over tokens; _first over position 0, _rest over the others",
	"margin":      "experts.margin prob: p_(1) - p_(2); logit: z_(1) - z_(2); 1 with a single expert; mean over tokens as entropy",
	"pooling":     "per length: the sums of every sample added (passes/*.experts_sums), then divided; a shard's pass files merge to the same tables",
}
