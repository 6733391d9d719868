package analysis

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/gonum/stat/distuv"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// Perplexity against context length, the protocol of RFA's Table 1
// (test perplexity at L ∈ {512, …, 4096} of models trained at one
// context), and the inference-time test of BFT's Prediction 3 (App. I):
// the same passes with a gated checkpoint's learned output gate replaced
// by 1 or by the Kalman gain K_BFT computed from each query's attention row
// (probes.GateOverride, probes.KGate).
//
// For each model, each length T and each sample s, a chunk of T + 1 stream
// tokens x_0 … x_T is cut (PlanChunks, non-overlapping); one forward pass
// over x_0 … x_{T−1} predicts x_{t+1} at position t, with
// NLL_t = logsumexp(z_t) − z_t[x_{t+1}] in float64 from the float32
// logits. A chunk's mean NLL is over its scored positions t ≥ first
// (PPLOptions.Positions); a length's is over all scored tokens of all its
// chunks, and ppl = exp(mean NLL).

// DefaultPPLOptions returns the defaults: T ∈ {256, 512, 1024, 2048,
// 4096}, 4 samples, every position, every gate variant, K_BFT of App. I.
func DefaultPPLOptions() results.PPLOptions {
	return results.PPLOptions{StreamPlan: results.StreamPlan{Lengths: []int{256, 512, 1024, 2048, 4096}, Samples: 4, Disjoint: DisjointAll,
		Placement: PlaceSequential, AllowExtrapolation: true}, Positions: results.PositionsAll, LambdaForm: "reml", CILevel: 0.95,
		Variants: []string{results.VariantLearned, results.VariantOne, string(probes.MapK), string(probes.MapKMatched), string(probes.MapKLambda), string(probes.MapMean)}}
}

// ParseVariants parses a comma-separated list of gate variants.
func ParseVariants(s string) ([]string, error) {
	var out []string
	for _, v := range strings.Split(s, ",") {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if v != results.VariantLearned && v != results.VariantOne {
			if _, err := probes.ParseGateMapping(v); err != nil {
				return nil, fmt.Errorf("gate variant %q: want learned, one, k, k-matched, k-lambda or mean", v)
			}
		}
		if slices.Contains(out, v) {
			return nil, fmt.Errorf("gate variant %q given twice", v)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no gate variant given (learned, one, k, k-matched, k-lambda, mean)")
	}
	return out, nil
}

// pplCalibrated reports whether any variant of o needs a calibration pass.
func pplCalibrated(o *results.PPLOptions) bool {
	for _, v := range o.Variants {
		if probes.GateMapping(v).Calibrated() {
			return true
		}
	}
	return false
}

// pplKGateOptions returns the probes options of mapping v under o.
func pplKGateOptions(o *results.PPLOptions, v string) (probes.KGateOptions, error) {
	k := probes.KGateOptions{Mapping: probes.GateMapping(v), Prior: o.Prior,
		Lambda: probes.LambdaOptions{Nu: o.Nu, Sigma02: o.Sigma02, LambdaMax: o.LambdaMax}}
	switch o.LambdaForm {
	case "", "reml":
		k.Lambda.Form = probes.REMLPrior
	case "naive":
		k.Lambda.Form = probes.REMLNaive
	default:
		return k, fmt.Errorf("lambda form %q: want reml (Eq. 6) or naive (Eq. 5)", o.LambdaForm)
	}
	return k, nil
}

// ValidatePPLOptions fills o's defaults and checks it.
func ValidatePPLOptions(o *results.PPLOptions) error {
	o.Positions = cmp.Or(o.Positions, results.PositionsAll)
	o.CILevel = cmp.Or(o.CILevel, 0.95)
	o.CalibSamples = cmp.Or(o.CalibSamples, 1)
	o.LambdaForm = cmp.Or(o.LambdaForm, "reml")
	co := pplChunkOptions(o, 0)
	if err := co.resolve(); err != nil {
		return err
	}
	o.Disjoint, o.Placement = co.Disjoint, co.Placement
	if len(o.Variants) == 0 {
		return errors.New("no gate variants")
	}
	if _, err := ParseVariants(strings.Join(o.Variants, ",")); err != nil {
		return err
	}
	for _, T := range o.Lengths {
		if _, err := o.FirstPosition(T); err != nil {
			return err
		}
	}
	if o.CalibLength == 0 {
		o.CalibLength = o.Lengths[0]
	}
	switch {
	case !(o.CILevel > 0 && o.CILevel < 1):
		return fmt.Errorf("ci level %v: want a fraction in (0, 1)", o.CILevel)
	case o.CalibLength < 1 || o.CalibSamples < 1:
		return fmt.Errorf("calibration of %d chunks of %d tokens: want at least 1 of at least 1", o.CalibSamples, o.CalibLength)
	case o.TrainLength < 0:
		return fmt.Errorf("train length %d is negative", o.TrainLength)
	}
	if _, err := pplKGateOptions(o, string(probes.MapK)); err != nil {
		return err
	}
	if _, err := probes.NewKGate(probes.KGateOptions{Prior: o.Prior, Lambda: probes.LambdaOptions{Nu: o.Nu, Sigma02: o.Sigma02, LambdaMax: o.LambdaMax}}, 1, 1, 1); err != nil {
		return err
	}
	return nil
}

// pplCalibTokens is the stream tokens the calibration chunks take.
func pplCalibTokens(o *results.PPLOptions) int {
	if !pplCalibrated(o) {
		return 0
	}
	return o.CalibLength * o.CalibSamples
}

// pplChunkOptions lays out the evaluation chunks (T + 1 tokens each)
// after the calibration chunks.
func pplChunkOptions(o *results.PPLOptions, calib int) ChunkOptions {
	ls := make([]int, len(o.Lengths))
	for i, T := range o.Lengths {
		ls[i] = T + 1
	}
	return ChunkOptions{Lengths: ls, Samples: o.Samples, Disjoint: o.Disjoint, Placement: o.Placement, Seed: o.Seed,
		Offset: o.Offset + calib}
}

// planPPL returns the evaluation chunks (Chunk.T is the context length T;
// the chunk holds T + 1 tokens) and the calibration chunks (Chunk.T is
// CalibLength; no calibration chunk unless a calibrated variant is asked
// for) of a stream of streamLen tokens. The options must be validated.
func planPPL(streamLen int, o results.PPLOptions) (eval, calib []results.Chunk, err error) {
	ct := pplCalibTokens(&o)
	for s := 0; ct > 0 && s < o.CalibSamples; s++ {
		start := o.Offset + s*o.CalibLength
		calib = append(calib, results.Chunk{T: o.CalibLength, Sample: s, Start: start, End: start + o.CalibLength})
	}
	eval, err = PlanChunks(streamLen, pplChunkOptions(&o, ct))
	if err != nil {
		if ct > 0 {
			err = fmt.Errorf("%w (after %d calibration tokens)", err, ct)
		}
		return nil, nil, err
	}
	for i := range eval {
		eval[i].T--
	}
	return eval, calib, nil
}

// pplCalibration is the variant name of a calibration pass.
const pplCalibration = "calibration"

// PPLGateRow is one row of a calibration pass file: what the learned gate
// and its query row were at one (layer, head, query), in the order the
// pass's gate function saw them (probes.GateFunc), which a calibrator
// replays (probes.KGateCalibrator.Observe).
type PPLGateRow struct {
	Layer   int     `parquet:"layer"`
	Head    int     `parquet:"head"`
	NEff    float64 `parquet:"n_eff"`
	SBar    float64 `parquet:"S_bar"`
	Learned float64 `parquet:"learned_gate"`
}

// pplTables are the tables of a ppl pass: one PPLChunkRow for an
// evaluation pass, the PPLGateRows for a calibration pass.
var pplTables = []string{"ppl"}

// PPLRun runs perplexity passes over one or more checkpoints (Dirs; the
// spec's Dir is unused), one pass per (model, variant, evaluation chunk)
// and per (model, calibration chunk), on the stream engine: it resumes,
// shards (every shard runs the calibration passes its calibrated variants
// need) and merges as GDNRun does. Its progress names each pass's model
// and variant (Progress.Label).
type PPLRun struct {
	RunSpec
	Dirs []string // checkpoint folders, loaded one at a time
	// Hubs, when set, says for each of Dirs where in the Hugging Face
	// cache it was found (nil: a folder given as such); such a model is
	// labelled by its hub id.
	Hubs    []*checkpoint.HubModel
	Options results.PPLOptions
}

// pplPlan is one model's passes.
type pplPlan struct {
	dir, label string
	cfg        *model.Config
	variants   []string
	notes      []string
}

// pplLabels returns the models' labels: the folder names (the hub id
// org/name of a folder found in the hub cache), with the index appended
// where two share a name.
func pplLabels(dirs []string, hubs []*checkpoint.HubModel) []string {
	name := func(i int) string {
		if i < len(hubs) && hubs[i] != nil {
			return hubs[i].Repo
		}
		return filepath.Base(filepath.Clean(dirs[i]))
	}
	count := map[string]int{}
	for i := range dirs {
		count[name(i)]++
	}
	out := make([]string, len(dirs))
	for i := range dirs {
		b := name(i)
		if count[b] > 1 {
			b = fmt.Sprintf("%s#%d", b, i)
		}
		out[i] = b
	}
	return out
}

// plan checks every model's config and the stream's ids against every
// vocabulary, and returns each model's variants and the run's passes: per
// model its calibration chunks (a gated model with a calibrated variant)
// then each variant's evaluation chunks.
func (r *PPLRun) plan(eval, calib []results.Chunk) ([]pplPlan, []results.Chunk, error) {
	o := &r.Options
	labels := pplLabels(r.Dirs, r.Hubs)
	var plans []pplPlan
	var passes []results.Chunk
	for i, dir := range r.Dirs {
		cfg, err := model.LoadConfig(dir)
		if err != nil {
			return nil, nil, err
		}
		p := pplPlan{dir: dir, label: labels[i], cfg: cfg}
		gated := cfg.LearnedGate()
		for _, v := range o.Variants {
			if v == results.VariantLearned || gated {
				p.variants = append(p.variants, v)
			}
		}
		if !gated {
			p.variants = []string{results.VariantLearned}
			if len(o.Variants) > 1 || o.Variants[0] != results.VariantLearned {
				p.notes = append(p.notes, fmt.Sprintf("no learned output gate (%s): only the learned (as trained) variant runs", cfg.Arch))
			}
		}
		for _, c := range append(slices.Clone(eval), calib...) {
			for j, id := range r.Stream[c.Start:c.End] {
				if id < 0 || id >= cfg.Vocab {
					return nil, nil, fmt.Errorf("%s: token %d at stream position %d is outside the vocabulary [0, %d) of %s",
						r.Source.File.Path, id, c.Start+j, cfg.Vocab, dir)
				}
			}
		}
		if cfg.LearnedPositions() && o.Lengths[len(o.Lengths)-1] > cfg.MaxPos {
			return nil, nil, fmt.Errorf("%s: length %d exceeds the %d learned positions of this %s model (they cannot extrapolate)", dir, o.Lengths[len(o.Lengths)-1], cfg.MaxPos, cfg.Arch)
		}
		if gated && hasCalibrated(p.variants) {
			for _, c := range calib {
				c.Pass = fmt.Sprintf("m%d/%s", i, pplCalibration)
				passes = append(passes, c)
			}
		}
		for _, v := range p.variants {
			for _, c := range eval {
				c.Pass = fmt.Sprintf("m%d/%s", i, v)
				passes = append(passes, c)
			}
		}
		plans = append(plans, p)
	}
	return plans, passes, nil
}

// Run validates everything it can before the first pass (options, every
// model's config, the stream's ids against every vocabulary), runs the
// passes of its shard that are not finished in Out (loading each model
// when its first pass comes), and, unsharded, writes the tables from the
// pass files. On a failure the manifest records the error.
func (r *PPLRun) Run() (*results.PPLResults, error) {
	start := time.Now()
	if len(r.Dirs) == 0 {
		return nil, errors.New("analysis: no model folders")
	}
	if err := ValidatePPLOptions(&r.Options); err != nil {
		return nil, err
	}
	if err := r.defaults(); err != nil {
		return nil, err
	}
	o := &r.Options
	eval, calib, err := planPPL(len(r.Stream), *o)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Source.File.Path, err)
	}
	plans, passes, err := r.plan(eval, calib)
	if err != nil {
		return nil, err
	}
	man := &results.PPLManifest{RunRecord: results.RunRecord{Kind: "ppl", Tool: Tool(), Created: start.UTC().Format(time.RFC3339), Args: r.Args,
		Shard: r.Shard, Source: r.Source, Conventions: pplConventions(o), Chunks: passes, Passes: []results.StreamPass{}, Threads: r.Threads,
		Formats: r.Formats, CLIOptions: r.CLIOptions},
		Options: *o, Eval: eval, Calibration: calib, GOMAXPROCS: runtime.GOMAXPROCS(0), NumCPU: runtime.NumCPU()}
	for _, p := range plans {
		man.Models = append(man.Models, results.PPLModel{Label: p.label, Variants: p.variants, Seconds: map[string]float64{}, Notes: p.notes})
	}
	res := &results.PPLResults{Manifest: man}
	mine := shardChunks(passes, man.Shard, isCalibration)

	// a shard loads every model its passes do not, whose digest the
	// manifest records
	ms := &pplMeasure{PPLRun: r, man: man, res: res, plans: plans, eval: eval, cur: -1,
		nll: make([]float64, 0, o.Lengths[len(o.Lengths)-1])}
	for i := range plans {
		if !slices.ContainsFunc(mine, func(c results.Chunk) bool { n, _ := results.PPLPass(c); return n == i }) {
			if err := ms.load(i); err != nil {
				return res, err
			}
		}
	}
	return res, runStream(&r.RunSpec, man, man.Options, nil, ms)
}

// pplMeasure is probe ppl's measurement, a multiModel: per model its
// calibration passes (the learned gate's rows) and per variant and chunk
// one pass's NLL row, whose tables finishPPL writes into res.
type pplMeasure struct {
	*PPLRun
	man   *results.PPLManifest
	res   *results.PPLResults
	plans []pplPlan
	eval  []results.Chunk
	// m is the model of the passes under way (plans[cur]; cur −1: none),
	// loaded when its first pass comes, with its calibrated gates once a
	// pass needs them
	m     *model.Model
	cur   int
	gates map[string]*probes.KGate
	nll   []float64 // a pass's token NLLs
}

func (p *pplMeasure) tables() []string              { return pplTables }
func (p *pplMeasure) prepare(c results.Chunk) error { i, _ := results.PPLPass(c); return p.load(i) }

func (p *pplMeasure) config(c results.Chunk) *model.Config {
	i, _ := results.PPLPass(c)
	return p.plans[i].cfg
}

func (p *pplMeasure) label(c results.Chunk) string {
	i, v := results.PPLPass(c)
	return p.plans[i].label + " " + v
}

func (p *pplMeasure) shared(c results.Chunk) bool { return isCalibration(c) }

// load makes model i the model under way, recording its info, load time
// and bf16 deviation in the manifest.
func (p *pplMeasure) load(i int) error {
	if i == p.cur {
		return nil
	}
	p.m, p.gates, p.cur = nil, nil, -1
	rec := &p.man.Models[i]
	t0 := time.Now()
	mm, err := model.Load(p.plans[i].dir, p.Load)
	if err != nil {
		return err
	}
	rec.Loading = time.Since(t0).Seconds()
	t0 = time.Now()
	if rec.Info, err = DescribeModel(mm); err != nil {
		return err
	}
	if i < len(p.Hubs) {
		rec.Info.Hub = p.Hubs[i]
	}
	rec.Hashing = time.Since(t0).Seconds()
	rec.Gated = mm.LearnedGate()
	if n := p.DeviationTokens; n > 0 && mm.Compute.BF16Products() && len(p.eval) > 0 {
		c := p.eval[0]
		ids := p.Stream[c.Start : c.Start+min(n, c.T)]
		if rec.Deviation, err = MeasureDeviation(mm, [][]int{ids}, mm.Compute, probes.CollectorOptions{}, len(ids) > mm.MaxPos, p.Threads); err != nil {
			return fmt.Errorf("%s: %w", p.plans[i].dir, err)
		}
	}
	p.m, p.cur = mm, i
	return nil
}

// forward runs one pass of chunk c through the model under way; logits
// (nil: not computed) receives the logits in blocks of rows
// (model.Options.LogitRows).
func (p *pplMeasure) forward(variant string, c results.Chunk, ids []int, logits func(int, []float32), g *probes.GateOverride, watch func(*hooks.Set)) error {
	hs := &hooks.Set{}
	watch(hs)
	if g != nil {
		if err := g.Register(hs, &p.m.Config, 1, len(ids)); err != nil {
			return err
		}
	}
	_, err := p.m.Forward([][]int{ids}, model.Options{Hooks: hs, LogitRows: logits, Threads: p.Threads,
		AllowExtrapolation: p.Options.AllowExtrapolation})
	if err != nil {
		return fmt.Errorf("%s, %s, T=%d sample %d (stream tokens [%d,%d)): %w", p.m.Dir, variant, c.T, c.Sample, c.Start, c.End, err)
	}
	return nil
}

func (p *pplMeasure) pass(c results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	o, m := &p.Options, p.m
	i, v := results.PPLPass(c)
	if v == pplCalibration {
		// the learned gate, every query row recorded for the
		// calibrated mappings
		var rows []PPLGateRow
		observe := func(g probes.GateRow) float64 {
			rows = append(rows, PPLGateRow{Layer: g.Layer, Head: g.Head, NEff: g.NEff, SBar: g.SBar, Learned: g.Learned})
			return g.Learned
		}
		if err := p.forward(v, c, p.Stream[c.Start:c.End], nil, probes.RowGate(observe), watch); err != nil {
			return nil, err
		}
		return []passTable{tableOf("ppl", rows)}, nil
	}
	var g *probes.GateOverride
	switch {
	case v == results.VariantOne:
		g = probes.ConstGate(1)
	case v == results.VariantLearned:
	case probes.GateMapping(v).Calibrated():
		if p.gates == nil {
			gates, err := pplGates(p.Out, p.man, i, &m.Config)
			if err != nil {
				return nil, err
			}
			p.gates = gates
		}
		g = probes.RowGate(p.gates[v].Gate)
	default:
		ko, err := pplKGateOptions(o, v)
		if err != nil {
			return nil, err
		}
		kg, err := probes.NewKGate(ko, m.Config.Layers, m.Heads, m.DHead)
		if err != nil {
			return nil, err
		}
		g = probes.RowGate(kg.Gate)
	}
	first, _ := o.FirstPosition(c.T)
	targets := p.Stream[c.Start+1 : c.End]
	p.nll = p.nll[:0]
	if err := p.forward(v, c, p.Stream[c.Start:c.Start+c.T], func(first int, z []float32) {
		p.nll = TokenNLL(p.nll, z, m.Vocab, targets[first:first+len(z)/m.Vocab])
	}, g, watch); err != nil {
		return nil, err
	}
	row := results.PPLChunkRow{Model: p.plans[i].label, Variant: v, T: c.T, Sample: c.Sample, Start: c.Start, End: c.End,
		First: first, N: c.T - first, Extrap: c.T > m.MaxPos}
	for _, x := range p.nll[first:] {
		row.NLLSum += x
	}
	row.NLL = row.NLLSum / float64(row.N)
	row.PPL = math.Exp(row.NLL)
	return []passTable{tableOf("ppl", []results.PPLChunkRow{row})}, nil
}

func (p *pplMeasure) finish() error {
	res, err := finishPPL(p.Out, p.man)
	if res != nil {
		*p.res = *res
	}
	return err
}

// isCalibration reports whether c is a calibration pass of ppl, which
// every shard runs (the calibrated variants' passes need it).
func isCalibration(c results.Chunk) bool { _, v := results.PPLPass(c); return v == pplCalibration }

// pplGates returns the calibrated gates of model i of man's run (config
// cfg, or nil for the shape man records), one per calibrated variant:
// each mapping's calibrator replays the rows of the model's calibration
// pass files in dir in order, as the pass fed them.
func pplGates(dir string, man *results.PPLManifest, i int, cfg *model.Config) (map[string]*probes.KGate, error) {
	layers, heads, dHead := man.Models[i].Info.Layers, man.Models[i].Info.Heads, man.Models[i].Info.DHead
	if cfg != nil {
		layers, heads, dHead = cfg.Layers, cfg.Heads, cfg.DHead
	}
	gates := map[string]*probes.KGate{}
	var cals []*probes.KGateCalibrator
	for _, v := range man.Models[i].Variants {
		if !probes.GateMapping(v).Calibrated() {
			continue
		}
		ko, err := pplKGateOptions(&man.Options, v)
		if err != nil {
			return nil, err
		}
		g, err := probes.NewKGate(ko, layers, heads, dHead)
		if err != nil {
			return nil, err
		}
		gates[v] = g
		cals = append(cals, g.Calibrator())
	}
	for _, c := range man.Chunks {
		if n, v := results.PPLPass(c); n != i || v != pplCalibration {
			continue
		}
		rows, err := readPassRows[PPLGateRow](dir, "ppl", man, man.Options, c)
		if err != nil {
			return nil, err
		}
		for _, row := range rows {
			for _, cal := range cals {
				cal.Observe(probes.GateRow{Layer: row.Layer, Head: row.Head, NEff: row.NEff, SBar: row.SBar, Learned: row.Learned})
			}
		}
	}
	for _, cal := range cals {
		if err := cal.Finish(); err != nil {
			return nil, fmt.Errorf("%s: %w", man.Models[i].Info.Dir, err)
		}
	}
	return gates, nil
}

// finishPPL writes ppl_summary, ppl_chunks and (with calibrated variants)
// ppl_calibration from the pass files of every pass of man in dir, and
// each model's seconds per variant from the passes' records.
func finishPPL(dir string, man *results.PPLManifest) (*results.PPLResults, error) {
	res := &results.PPLResults{Manifest: man}
	o := &man.Options
	seconds := map[string]float64{}
	for _, p := range man.Passes {
		seconds[p.Key.Pass] += p.Seconds
	}
	for i := range man.Models {
		pm := &man.Models[i]
		pm.Seconds = map[string]float64{}
		pm.CalibSecond = seconds[fmt.Sprintf("m%d/%s", i, pplCalibration)]
		for _, v := range pm.Variants {
			pm.Seconds[v] = seconds[fmt.Sprintf("m%d/%s", i, v)]
		}
	}
	for _, c := range man.Chunks {
		if _, v := results.PPLPass(c); v == pplCalibration {
			continue
		}
		rows, err := readPassRows[results.PPLChunkRow](dir, "ppl", man, man.Options, c)
		if err != nil {
			return nil, err
		}
		res.Chunks = append(res.Chunks, rows...)
	}
	for i, pm := range man.Models {
		if pm.Gated && hasCalibrated(pm.Variants) {
			gates, err := pplGates(dir, man, i, nil)
			if err != nil {
				return nil, err
			}
			for _, v := range pm.Variants {
				if g := gates[v]; g != nil {
					for _, cell := range g.Cells {
						if cell.Rows == 0 {
							continue // a layer without softmax rows (Gated DeltaNet)
						}
						res.Calibration = append(res.Calibration, results.PPLCalibRow{Model: pm.Label, Variant: v, Layer: cell.Layer, Head: cell.Head,
							Rows: cell.Rows, MeanGate: cell.MeanGate, MeanK: cell.MeanK, Scale: cell.Scale, Lambda: cell.Lambda})
					}
				}
			}
		}
		for _, T := range o.Lengths {
			res.Summary = append(res.Summary, summarizePPL(res.Chunks, pm.Label, pm.Variants, T, pm.Info.MaxPos, o)...)
		}
	}
	tables := []passTable{tableOf("ppl_summary", res.Summary), tableOf("ppl_chunks", res.Chunks)}
	if len(res.Calibration) > 0 {
		tables = append(tables, tableOf("ppl_calibration", res.Calibration))
	}
	return res, writeTables(man.Record(), dir, tables...)
}

func hasCalibrated(variants []string) bool {
	for _, v := range variants {
		if probes.GateMapping(v).Calibrated() {
			return true
		}
	}
	return false
}

// TokenNLL appends to dst the negative log-likelihood of each target under
// the logits rows (row t = logits[t·V : (t+1)·V] predicts targets[t]),
// logsumexp(z) − z[target], in float64 with the row maximum subtracted.
func TokenNLL(dst []float64, logits []float32, V int, targets []int) []float64 {
	for t, y := range targets {
		z := logits[t*V : (t+1)*V]
		m := z[0]
		for _, x := range z {
			if x > m {
				m = x
			}
		}
		mf := float64(m)
		var s float64
		for _, x := range z {
			s += math.Exp(float64(x) - mf)
		}
		dst = append(dst, mf+math.Log(s)-float64(z[y]))
	}
	return dst
}

// summarizePPL returns the summary rows of one model and length, one per
// variant, from the chunk rows.
func summarizePPL(chunks []results.PPLChunkRow, label string, variants []string, T, maxPos int, o *results.PPLOptions) []results.PPLSummaryRow {
	by := map[string][]results.PPLChunkRow{}
	for _, c := range chunks {
		if c.Model == label && c.T == T {
			by[c.Variant] = append(by[c.Variant], c)
		}
	}
	base := by[results.VariantLearned]
	var out []results.PPLSummaryRow
	for _, v := range variants {
		cs := by[v]
		if len(cs) == 0 {
			continue
		}
		row := results.PPLSummaryRow{Model: label, Variant: v, T: T, Samples: len(cs), First: cs[0].First, Extrap: T > maxPos, MaxPos: maxPos,
			TMinusTr: T - o.TrainLength}
		var sum float64
		means := make([]float64, len(cs))
		for i, c := range cs {
			row.N += c.N
			sum += c.NLLSum
			means[i] = c.NLL
		}
		row.NLL = sum / float64(row.N)
		row.PPL = math.Exp(row.NLL)
		row.Std, row.SE, row.NLLLo, row.NLLHi = tInterval(means, o.CILevel)
		row.PPLLo, row.PPLHi = math.Exp(row.NLLLo), math.Exp(row.NLLHi)
		row.DNLL, row.DNLLLo, row.DNLLHi = math.NaN(), math.NaN(), math.NaN()
		if v != results.VariantLearned && len(base) == len(cs) {
			d := make([]float64, len(cs))
			for i := range cs {
				d[i] = cs[i].NLL - base[i].NLL
			}
			var s float64
			for _, x := range d {
				s += x
			}
			row.DNLL = s / float64(len(d))
			_, _, row.DNLLLo, row.DNLLHi = tInterval(d, o.CILevel)
		}
		out = append(out, row)
	}
	return out
}

// tInterval returns the std (ddof 1) of x, the standard error of its mean
// and the two-sided Student-t interval at level around the mean; std, se
// and the interval are NaN for fewer than two values.
func tInterval(x []float64, level float64) (std, se, lo, hi float64) {
	m := momentsOf(x)
	mean := m.Mean()
	if len(x) < 2 {
		return math.NaN(), math.NaN(), math.NaN(), math.NaN()
	}
	std = m.Std(1)
	se = std / math.Sqrt(float64(len(x)))
	q := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(x) - 1)}.Quantile(0.5 + level/2)
	return std, se, mean - q*se, mean + q*se
}

// pplConventions spells out the readings of a perplexity run.
func pplConventions(o *results.PPLOptions) map[string]string {
	first := "every position t = 0 … T−1"
	switch {
	case o.Positions == results.PositionsLastQuarter:
		first = "positions t ≥ T − ⌊T/4⌋ (the last quarter)"
	case strings.HasPrefix(o.Positions, results.PositionsFromPrefix):
		first = "positions t ≥ " + strings.TrimPrefix(o.Positions, results.PositionsFromPrefix)
	}
	return map[string]string{
		"T":            "context length = tokens in the forward pass; a chunk holds T + 1 stream tokens x_0 … x_T, position t predicts x_{t+1} from x_0 … x_t",
		"nll":          "NLL_t = logsumexp(z_t) − z_t[x_{t+1}] in float64 from the float32 logits",
		"scored":       first,
		"ppl":          "exp(mean NLL over every scored token of the length's chunks); chunk_std = std of the chunk means (ddof 1); interval: Student t on the chunk means at ci_level, through exp for ppl",
		"d_nll":        "paired: mean over chunks of (variant's chunk NLL − learned's on the same chunk), Student-t interval; < 0 means better than the learned gate",
		"extrapolated": "T > max_position_embeddings; such passes run with AllowExtrapolation",
		"learned":      "the checkpoint as trained (its learned gate, if any)",
		"one":          "every output gate set to 1 (gate removed)",
		"k":            "gate = K_BFT = λobs/(λ + λobs), λobs = (n_eff + ν)/(S̄ + ν σ0²) (Eq. 6; Eq. 5 with lambda_form naive), of the query's own attention row; λ = prior",
		"k-matched":    "gate = c_lh·K_BFT, c_lh = mean learned gate / mean K_BFT over the calibration chunks (uses the learned gate for calibration)",
		"k-lambda":     "gate = λobs/(λ_lh + λobs), λ_lh fitted per (layer, head) so the mean gate over the calibration chunks equals the learned gate's mean (uses the learned gate for calibration)",
		"mean":         "control: gate = the learned gate's mean over the calibration chunks, per (layer, head), constant",
		"calibration":  "calib_samples chunks of calib_length tokens from offset, before every evaluation chunk, run with the learned gate; every query row of every chunk counts",
		"gate_scalar":  "one gate per (layer, head, query); an element-wise learned gate is replaced by that value in all its d_head entries, and its learned value is the mean of the entries",
	}
}

// ReadPPL reads the manifest and tables of a perplexity run folder (the
// Parquet tables).
func ReadPPL(dir string) (*results.PPLResults, error) {
	b, err := os.ReadFile(filepath.Join(dir, results.PPLManifestName))
	if err != nil {
		return nil, err
	}
	var man results.PPLManifest
	if err := json.Unmarshal(b, &man); err != nil {
		return nil, fmt.Errorf("%s: not a perplexity manifest: %w", filepath.Join(dir, results.PPLManifestName), err)
	}
	if man.Kind != "ppl" {
		return nil, fmt.Errorf("%s: kind %q, not a perplexity run", filepath.Join(dir, results.PPLManifestName), man.Kind)
	}
	if !man.Complete {
		return nil, fmt.Errorf("%s: the run did not finish (%s)", dir, man.Error)
	}
	if man.Shard.Count > 1 {
		return nil, fmt.Errorf("%s: a shard of a perplexity run holds no tables: combine the shards with probe merge", dir)
	}
	res := &results.PPLResults{Manifest: &man}
	if res.Summary, err = results.ReadTable[results.PPLSummaryRow](filepath.Join(dir, "ppl_summary.parquet")); err != nil {
		return nil, err
	}
	if res.Chunks, err = results.ReadTable[results.PPLChunkRow](filepath.Join(dir, "ppl_chunks.parquet")); err != nil {
		return nil, err
	}
	if slices.Contains(man.Tables, "ppl_calibration.parquet") || slices.Contains(man.Tables, "ppl_calibration") { // the latter: before passes/
		if res.Calibration, err = results.ReadTable[results.PPLCalibRow](filepath.Join(dir, "ppl_calibration.parquet")); err != nil {
			return nil, err
		}
	}
	return res, nil
}
