package analysis

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"
	"github.com/filterlens/probe/probes"
)

// Which copy steps a retrieval score counts (RetrievalOptions.Steps).
const (
	// StepsCopied counts the copy queries where the model's greedy next
	// token is the copy (Wu et al.: the tokens the model generates from
	// the needle).
	StepsCopied = "copied"
	// StepsAll counts every copy query (teacher forcing: the head's
	// behaviour whether or not the model copies).
	StepsAll = "all"
)

// DefaultRetrievalOptions are the command's defaults.
func DefaultRetrievalOptions() results.RetrievalOptions {
	return results.RetrievalOptions{Segment: 64, Samples: 4, Seed: 1, Steps: StepsCopied, Above: 0.1}
}

// RetrievalCopyRow is one row of a retrieval pass file (table
// retrieval_copies): one copy query of one sample and the model's greedy
// next token there.
type RetrievalCopyRow struct {
	Sample int  `parquet:"sample"`
	Query  int  `parquet:"query"`  // position t
	Source int  `parquet:"source"` // copy source s(t)
	Next   int  `parquet:"next"`   // x[t+1], the copy of x[s(t)]
	Greedy int  `parquet:"greedy"` // argmax of the logits at t
	Copied bool `parquet:"copied"` // greedy = next
}

// RetrievalStepRow is one row of a retrieval pass file (table
// retrieval_steps): what one softmax (layer, head) did at one copy query
// of one sample (probes.RetrievalCollector.Query).
type RetrievalStepRow struct {
	Sample int     `parquet:"sample"`
	Layer  int     `parquet:"layer"`
	Head   int     `parquet:"head"`
	Query  int     `parquet:"query"`
	Argmax int     `parquet:"argmax"`      // argmax_j α[t, j] (first maximum)
	Mass   float32 `parquet:"source_mass"` // α[t, s(t)]
}

// retrievalTables are the tables of a retrieval pass, from which
// retrieval_heads is written.
var retrievalTables = []string{"retrieval_copies", "retrieval_steps"}

// RetrievalRun is one `probe retrieval` run: one pass per sample, its
// copy queries and every softmax head's argmax and source weight there in
// two pass files in Out/passes, then retrieval_heads and
// retrieval_manifest.json. It resumes and shards as GDNRun does; the
// spec's Stream and Source are unused (each sample makes its own ids,
// CopyTask).
type RetrievalRun struct {
	RunSpec
	Options results.RetrievalOptions
}

// CopyTask returns the token ids of one pass of the copy task: n distinct
// ids, gap filler ids not among them, the n ids again; drawn from a PCG
// seeded by (seed, sample) over [0, vocab).
func CopyTask(n, gap, vocab int, seed uint64, sample int) ([]int, error) {
	if n < 2 || n >= vocab || gap < 0 {
		return nil, fmt.Errorf("copy task: segment %d, gap %d: want 2 ≤ segment < vocabulary (%d) and gap ≥ 0", n, gap, vocab)
	}
	rng := rand.New(rand.NewPCG(seed, uint64(sample)))
	perm := rng.Perm(vocab)
	seg, rest := perm[:n], perm[n:]
	ids := append([]int{}, seg...)
	for i := 0; i < gap; i++ {
		ids = append(ids, rest[rng.IntN(len(rest))])
	}
	return append(ids, seg...), nil
}

// Run runs the passes and, unsharded, writes retrieval_heads and the
// manifest, returning the table's rows (none for a shard).
func (r *RetrievalRun) Run() (*results.RetrievalManifest, []results.RetrievalHeadRow, error) {
	o := &r.Options
	switch {
	case o.Steps != StepsCopied && o.Steps != StepsAll:
		return nil, nil, fmt.Errorf("steps %q: want %s or %s", o.Steps, StepsCopied, StepsAll)
	case o.Samples < 1:
		return nil, nil, fmt.Errorf("samples = %d: want at least 1", o.Samples)
	case !(o.Above >= 0 && o.Above < 1):
		return nil, nil, fmt.Errorf("above = %v: want a score threshold in [0, 1)", o.Above)
	}
	T := 2*o.Segment + o.Gap
	chunks := make([]results.Chunk, o.Samples)
	for s := range chunks {
		chunks[s] = results.Chunk{T: T, Sample: s, Start: 0, End: T}
	}
	m, rec, err := r.load("retrieval", chunks)
	if err != nil {
		return nil, nil, err
	}
	c := &m.Config
	if _, err := CopyTask(o.Segment, o.Gap, c.Vocab, o.Seed, 0); err != nil {
		return nil, nil, err
	}
	if c.MaxPos > 0 && T > c.MaxPos && !o.AllowExtrapolation {
		return nil, nil, fmt.Errorf("2 × segment + gap = %d tokens exceeds the model's max_position_embeddings %d (pass --allow-extrapolation to run it anyway)", T, c.MaxPos)
	}
	sources, err := probes.CopySources(T, 0, o.Segment+o.Gap, o.Segment)
	if err != nil {
		return nil, nil, err
	}
	man := &results.RetrievalManifest{RunRecord: rec, SoftmaxLayers: softmaxLayers(c), Options: *o, T: T}
	man.Conventions = maps.Clone(retrievalConventions)
	ms := &retrievalMeasure{RetrievalRun: r, m: m, man: man, sources: sources}
	if err := runStream(&r.RunSpec, man, man.Options, m, ms); err != nil {
		return man, nil, err
	}
	return man, ms.rows, nil
}

// retrievalMeasure is probe retrieval's measurement: per sample one pass
// over its copy task (CopyTask) with a probes.RetrievalCollector on the
// softmax layers, whose tables (retrievalPass) finishRetrieval pools.
type retrievalMeasure struct {
	*RetrievalRun
	m       *model.Model
	man     *results.RetrievalManifest
	sources []int // each query's copy source (probes.CopySources)
	rows    []results.RetrievalHeadRow
}

func (r *retrievalMeasure) tables() []string { return retrievalTables }

func (r *retrievalMeasure) ids(ch results.Chunk) []int {
	ids, _ := CopyTask(r.Options.Segment, r.Options.Gap, r.m.Vocab, r.Options.Seed, ch.Sample)
	return ids
}

func (r *retrievalMeasure) pass(ch results.Chunk, watch func(*hooks.Set)) ([]passTable, error) {
	c, ids := &r.m.Config, r.ids(ch)
	col, err := probes.NewRetrievalCollector(1, c.Layers, c.Heads, r.man.T, r.sources)
	if err != nil {
		return nil, err
	}
	hs := &hooks.Set{}
	for _, l := range r.man.Layers {
		hs.Stream(l, col)
	}
	watch(hs)
	out, err := r.m.Forward([][]int{ids}, model.Options{Hooks: hs, Logits: true, AllowExtrapolation: r.Options.AllowExtrapolation,
		TileRows: r.Options.TileRows, Threads: r.Threads})
	if err != nil {
		return nil, err
	}
	return retrievalPass(ch.Sample, ids, r.sources, out.Logits, c.Vocab, r.man.Layers, c.Heads, col)
}

func (r *retrievalMeasure) finish() (err error) {
	r.rows, err = finishRetrieval(r.Out, r.man)
	return err
}

// retrievalPass returns the pass tables of one sample: its copy queries
// with the greedy next token from the logits ([T, V]), and at each of
// them every (layer, head) of layers' argmax and source weight, in the
// order (layer, head, query).
func retrievalPass(sample int, ids, sources []int, logits []float32, V int, layers []int, H int, col *probes.RetrievalCollector) ([]passTable, error) {
	var copies []RetrievalCopyRow
	for t, src := range sources {
		if src < 0 {
			continue
		}
		z := logits[t*V : (t+1)*V]
		best := 0
		for v, x := range z {
			if x > z[best] {
				best = v
			}
		}
		copies = append(copies, RetrievalCopyRow{Sample: sample, Query: t, Source: src, Next: ids[t+1], Greedy: best, Copied: best == ids[t+1]})
	}
	var steps []RetrievalStepRow
	for _, l := range layers {
		for h := 0; h < H; h++ {
			for _, q := range copies {
				a, mass, ok := col.Query(0, l, h, q.Query)
				if !ok {
					return nil, fmt.Errorf("layer %d head %d query %d was never streamed", l, h, q.Query)
				}
				steps = append(steps, RetrievalStepRow{Sample: sample, Layer: l, Head: h, Query: q.Query, Argmax: a, Mass: mass})
			}
		}
	}
	return []passTable{tableOf("retrieval_copies", copies), tableOf("retrieval_steps", steps)}, nil
}

// finishRetrieval writes retrieval_heads from the pass files of every
// sample of man in dir: per (layer, head), over the counted copy steps of
// every sample in order (retrieval.steps: copied or all), hits / steps and
// the mean source weight (NaN without steps), as
// probes.RetrievalCollector.Scores counts them.
func finishRetrieval(dir string, man *results.RetrievalManifest) ([]results.RetrievalHeadRow, error) {
	o := &man.Options
	var copies [][]RetrievalCopyRow
	var steps [][]RetrievalStepRow
	man.Samples, man.HeadsAbove = nil, 0
	for i, c := range man.Chunks {
		cp, err := readPassRows[RetrievalCopyRow](dir, "retrieval_copies", man, man.Options, c)
		if err != nil {
			return nil, err
		}
		st, err := readPassRows[RetrievalStepRow](dir, "retrieval_steps", man, man.Options, c)
		if err != nil {
			return nil, err
		}
		if (len(cp) > 0 && len(st)%len(cp) != 0) || (len(steps) > 0 && (len(st) != len(steps[0]) || len(cp) != len(copies[0]))) {
			return nil, fmt.Errorf("pass of sample %d in %s: %d step rows for %d copy queries and layers %v", c.Sample, dir, len(st), len(cp), man.Layers)
		}
		s := results.RetrievalSample{Sample: c.Sample, CopyQueries: len(cp)}
		for _, q := range cp {
			if q.Copied {
				s.Copied++
			}
		}
		s.CopyRate = float64(s.Copied) / float64(s.CopyQueries)
		if i < len(man.Passes) {
			s.Tokens, s.Seconds = man.Passes[i].Key.Tokens, man.Passes[i].Seconds
		}
		man.Samples = append(man.Samples, s)
		copies, steps = append(copies, cp), append(steps, st)
	}
	var rows []results.RetrievalHeadRow
	Q := len(copies[0])
	for k := 0; Q > 0 && k < len(steps[0])/Q; k++ {
		first := steps[0][k*Q]
		row := results.RetrievalHeadRow{SoftmaxHead: man.HeadOf(first.Layer, first.Head)}
		var mass float64
		for b := range steps {
			for q, st := range steps[b][k*Q : (k+1)*Q] {
				if o.Steps == StepsCopied && !copies[b][q].Copied {
					continue
				}
				row.Steps++
				if st.Argmax == copies[b][q].Source {
					row.Hits++
				}
				mass += float64(st.Mass)
			}
		}
		row.Score, row.SourceMass = math.NaN(), math.NaN()
		if row.Steps > 0 {
			row.Score, row.SourceMass = float64(row.Hits)/float64(row.Steps), mass/float64(row.Steps)
		}
		if row.Score > o.Above {
			man.HeadsAbove++
		}
		rows = append(rows, row)
	}
	if len(man.Layers) < len(man.Windows) {
		man.Notes = append(man.Notes, fmt.Sprintf("measured the softmax layers %v; the others are Gated DeltaNet or Mamba-2 layers", man.Layers))
	}
	if len(rows) > 0 && rows[0].Steps == 0 {
		man.Notes = append(man.Notes, "the model copied at no copy step: every score is empty (NaN); --steps all scores every copy query")
	}
	return rows, writeTables(man.Record(), dir, tableOf("retrieval_heads", rows))
}

// retrievalConventions states the definitions behind the retrieval table;
// Run records a copy in each manifest.
var retrievalConventions = map[string]string{
	"task":            "a pass is a segment of n distinct token ids, gap filler ids not in the segment, and the segment again (T = 2n + gap), from PCG(seed, sample) over the whole vocabulary",
	"copy_step":       "query t = n + gap + i − 1 (i = 1 … n − 1) of the second copy, whose next token is the copy of x[i] (its source s(t) = i); counted per retrieval.steps: copied (the model's greedy next token is the copy, Wu et al. 2024) or all",
	"retrieval_score": "hits / steps over the counted copy steps of every sample, a hit when argmax_j alpha[t, j] = s(t) (first maximum on ties): Wu et al.'s copy-paste condition, since no other visible position holds the copied token",
	"source_mass":     "mean over the counted copy steps of alpha[t, s(t)] (0 where s(t) is outside a sliding window); 1/(t + 1) for uniform attention",
	"heads_above":     "heads whose retrieval_score exceeds retrieval.above (Wu et al.'s retrieval heads: > 0.1)",
	"attention_rows":  "post-softmax, pre-gate rows of the softmax layers, streamed in tiles; never a T x T matrix",
}
