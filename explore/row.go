package explore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// RowRequest names one attention row: query Query of head Head of layer
// Layer in pass (T, Sample) of the sweep.
type RowRequest struct {
	T, Sample, Layer, Head, Query int
}

// Row is one attention row over the keys 0 … Query. For a softmax layer
// Weights[j] = α[Query, j], post-softmax and pre-gate (hook_pattern's row);
// for a Gated DeltaNet layer it is the effective attention W[Query, j] with
// core_out[Query] = Σ_j W[Query, j]·v_j (not a distribution: it need not
// sum to 1 and may be negative).
type Row struct {
	T       int       `json:"T"`
	Sample  int       `json:"sample"`
	Layer   int       `json:"layer"`
	Head    int       `json:"head"`
	Query   int       `json:"query"`
	Kind    string    `json:"kind"`   // "softmax" or "gated_deltanet"
	Window  int       `json:"window"` // the layer's sliding window (0: none): keys j > Query − Window
	Weights []float32 `json:"weights"`
	Tokens  []string  `json:"tokens"`
	Top     []TopKey  `json:"top"`
	Sum     float64   `json:"sum"`
	Model   string    `json:"model"` // the model's digest (manifest model.digest)
	Seconds float64   `json:"seconds"`
	Cached  bool      `json:"cached"`
}

// TopKey is one of a row's largest weights (by absolute value).
type TopKey struct {
	Key    int     `json:"key"`
	Weight float32 `json:"weight"`
	Token  string  `json:"token"`
}

// ErrNoRows is wrapped by the error of a row request for a layer that
// streams no attention rows (its token mixer has none).
var ErrNoRows = errors.New("no attention rows")

// ErrNoHead is wrapped by the error of a row request for a head the layer
// does not have (known only once the pass has run for a Gated DeltaNet
// layer, whose value heads the manifest does not count).
var ErrNoHead = errors.New("no such head")

// ErrBusy is returned when the row queue is full.
var ErrBusy = errors.New("row queue full")

// rowRunner runs the model passes behind row requests one at a time, in
// arrival order, sharing the pass of identical requests in flight.
type rowRunner struct {
	f        *Folder
	opts     Options
	sem      chan struct{}
	mu       sync.Mutex
	waiting  int
	inflight map[RowRequest]*rowCall

	running *RowRequest // the pass under way (nil: none), under mu
	started time.Time

	loadOnce sync.Once
	m        *model.Model
	loadErr  error
}

type rowCall struct {
	done chan struct{}
	row  *Row
	err  error
}

func newRowRunner(f *Folder, o Options) *rowRunner {
	return &rowRunner{f: f, opts: o, sem: make(chan struct{}, 1), inflight: map[RowRequest]*rowCall{}}
}

// modelDir is where the row passes load the model from: Options.ModelDir,
// else the manifest's model folder (as recorded, or relative to the
// measurement folder or its parent when it was recorded relative).
func (r *rowRunner) modelDir() string {
	if r.opts.ModelDir != "" {
		return r.opts.ModelDir
	}
	d := r.f.Model.Dir
	for _, c := range candidates(r.f.Dir, d) {
		if _, err := os.Stat(filepath.Join(c, "config.json")); err == nil {
			return c
		}
	}
	return d
}

// available says whether rows can be computed, without loading anything:
// the model folder has a config.json and the token stream was rebuilt.
func (r *rowRunner) available() error {
	dir := r.modelDir()
	if _, err := os.Stat(filepath.Join(dir, "config.json")); err != nil {
		return fmt.Errorf("the sweep's model %s is not found (no config.json there): rows are unavailable; pass --model to give its folder", dir)
	}
	_, err := r.f.loadSource()
	return err
}

// load loads the model once and checks that it is the model the sweep ran
// (the digest over its files' sha256).
func (r *rowRunner) load() (*model.Model, error) {
	r.loadOnce.Do(func() {
		if err := r.available(); err != nil {
			r.loadErr = err
			return
		}
		m, err := model.Load(r.modelDir(), model.LoadOptions{})
		if err != nil {
			r.loadErr = fmt.Errorf("loading the model for rows: %w", err)
			return
		}
		info, err := analysis.DescribeModel(m)
		if err != nil {
			r.loadErr = err
			return
		}
		if want := r.f.Model.Digest; info.Digest != want {
			r.loadErr = fmt.Errorf("the model in %s has digest %.12s, the sweep ran %.12s: rows are unavailable (give the sweep's model with --model)", r.modelDir(), info.Digest, want)
			return
		}
		r.m = m
	})
	return r.m, r.loadErr
}

// row returns the row of q, from the cache or by a pass; ctx bounds the
// wait in the queue and the pass.
func (r *rowRunner) row(ctx context.Context, q RowRequest) (*Row, error) {
	if err := r.check(q); err != nil {
		return nil, err
	}
	if row, ok := r.cached(q); ok {
		return row, nil
	}
	r.mu.Lock()
	if c, ok := r.inflight[q]; ok {
		r.mu.Unlock()
		select {
		case <-c.done:
			return c.row, c.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if r.waiting >= r.opts.MaxQueue {
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: %d row passes already waiting (try again when they finish)", ErrBusy, r.waiting)
	}
	c := &rowCall{done: make(chan struct{})}
	r.inflight[q] = c
	r.waiting++
	r.mu.Unlock()
	go func() {
		// The pass runs to its end even when the asking request gives up,
		// so that its row lands in the cache for the next ask.
		r.sem <- struct{}{}
		r.mu.Lock()
		r.running, r.started = &q, time.Now()
		r.mu.Unlock()
		c.row, c.err = r.compute(q)
		r.mu.Lock()
		r.running = nil
		r.mu.Unlock()
		<-r.sem
		r.mu.Lock()
		delete(r.inflight, q)
		r.waiting--
		r.mu.Unlock()
		close(c.done)
	}()
	select {
	case <-c.done:
		return c.row, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("the row is still being computed (%w); ask again later: it will be cached", ctx.Err())
	}
}

// RowStatus is /api/status: the row pass under way, for how long, and
// how many distinct passes are queued or running.
type RowStatus struct {
	Running *RowRequest `json:"running"`
	Seconds float64     `json:"seconds"`
	Waiting int         `json:"waiting"`
}

func (r *rowRunner) status() RowStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RowStatus{Running: r.running, Waiting: r.waiting}
	if r.running != nil {
		st.Seconds = time.Since(r.started).Seconds()
	}
	return st
}

// check validates a request against the manifest and the model's shape
// before anything runs.
func (r *rowRunner) check(q RowRequest) error {
	info := r.f.Model
	if _, err := r.f.chunk(q.T, q.Sample); err != nil {
		return err
	}
	if q.Layer < 0 || q.Layer >= info.Layers {
		return fmt.Errorf("layer %d: the model has layers 0 … %d", q.Layer, info.Layers-1)
	}
	if q.Query < 0 || q.Query >= q.T {
		return fmt.Errorf("query %d: pass T %d has queries 0 … %d", q.Query, q.T, q.T-1)
	}
	if q.Head < 0 {
		return fmt.Errorf("head %d: want ≥ 0", q.Head)
	}
	if !slices.Contains(measured(info), q.Layer) && q.Head >= info.Heads {
		return nil // a Gated DeltaNet layer: its value heads are checked against the loaded config
	}
	if q.Head >= info.Heads {
		return fmt.Errorf("head %d: the model has heads 0 … %d", q.Head, info.Heads-1)
	}
	return nil
}

// measured returns the layers with softmax rows (every layer unless the
// manifest lists them).
func measured(info results.ModelInfo) []int {
	if info.MeasuredLayers != nil {
		return info.MeasuredLayers
	}
	ls := make([]int, info.Layers)
	for i := range ls {
		ls[i] = i
	}
	return ls
}

func (r *rowRunner) cachePath(q RowRequest) string {
	return filepath.Join(r.f.Dir, CacheDir, "rows", fmt.Sprintf("T%d-s%d-l%d-h%d-q%d.json", q.T, q.Sample, q.Layer, q.Head, q.Query))
}

// cached reads a cached row; one made for another model is ignored.
func (r *rowRunner) cached(q RowRequest) (*Row, bool) {
	b, err := os.ReadFile(r.cachePath(q))
	if err != nil {
		return nil, false
	}
	var row Row
	if json.Unmarshal(b, &row) != nil || row.Model != r.f.Model.Digest || len(row.Weights) != q.Query+1 {
		return nil, false
	}
	if ids, tok, err := r.f.passIDs(q.T, q.Sample); err == nil {
		row.Tokens = tokenStrings(tok, ids[:q.Query+1])
		row.Top = topKeys(row.Weights, row.Tokens, 10)
	}
	row.Cached = true
	return &row, true
}

// writeCache stores a row (without its token strings) atomically.
func (r *rowRunner) writeCache(q RowRequest, row *Row) error {
	p := r.cachePath(q)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	c := *row
	c.Tokens, c.Top = nil, nil
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return atomicfile.WriteBytes(p, b)
}

// compute runs the pass for q and caches its row.
func (r *rowRunner) compute(q RowRequest) (*Row, error) {
	start := time.Now()
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	ids, tok, err := r.f.passIDs(q.T, q.Sample)
	if err != nil {
		return nil, err
	}
	weights, kind, err := OneRow(m, ids, q.Layer, q.Head, q.Query, r.opts.FullPass, r.opts.Threads)
	if err != nil {
		return nil, err
	}
	row := &Row{T: q.T, Sample: q.Sample, Layer: q.Layer, Head: q.Head, Query: q.Query, Kind: kind,
		Weights: weights, Model: r.f.Model.Digest, Seconds: time.Since(start).Seconds()}
	if w := r.f.Model.Windows; q.Layer < len(w) {
		row.Window = w[q.Layer]
	}
	for _, w := range weights {
		row.Sum += float64(w)
	}
	if err := r.writeCache(q, row); err != nil {
		return nil, fmt.Errorf("writing the row cache: %w", err)
	}
	row.Tokens = tokenStrings(tok, ids[:q.Query+1])
	row.Top = topKeys(weights, row.Tokens, 10)
	return row, nil
}

// topKeys returns the k keys with the largest |weight|, largest first.
func topKeys(w []float32, tokens []string, k int) []TopKey {
	idx := make([]int, len(w))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return math.Abs(float64(w[idx[a]])) > math.Abs(float64(w[idx[b]])) })
	out := make([]TopKey, 0, k)
	for _, j := range idx[:min(k, len(idx))] {
		t := ""
		if j < len(tokens) {
			t = tokens[j]
		}
		out = append(out, TopKey{Key: j, Weight: w[j], Token: t})
	}
	return out
}

// rowKeeper is an attention consumer that keeps the single row it was made
// for and nothing else.
type rowKeeper struct {
	layer, head, query int
	mu                 sync.Mutex
	row                []float32
	kind               string
	heads              int // the largest head index seen + 1
}

func (k *rowKeeper) keep(t *hooks.AttnTile, kind string) error {
	if t.Batch != 0 || t.Layer != k.layer {
		return nil
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.heads = max(k.heads, t.Head+1)
	if k.kind == "" {
		k.kind = kind
	}
	if t.Head != k.head || k.query < t.Q0 || k.query >= t.Q0+t.Rows {
		return nil
	}
	k.row = slices.Clone(t.Row(k.query - t.Q0))
	return nil
}

func (k *rowKeeper) ConsumeAttn(t *hooks.AttnTile) error  { return k.keep(t, "softmax") }
func (k *rowKeeper) ConsumeDelta(t *hooks.AttnTile) error { return k.keep(t, "gated_deltanet") }

// OneRow runs m on ids as far as layer's attention and returns the row of
// query t of head h: α[t, 0..t] for a softmax layer (hook_pattern's row,
// post-softmax, pre-gate), the effective attention W[t, 0..t] for a Gated
// DeltaNet layer. Nothing T×T and no whole-T capture is kept: a consumer
// copies the one row. Unless full, only the tokens 0 … t are run: the pass
// is causal, so the row is the same (up to the rounding of a different
// tiling) and the pass costs t+1 tokens, not T.
func OneRow(m *model.Model, ids []int, layer, h, t int, full bool, threads int) ([]float32, string, error) {
	if t < 0 || t >= len(ids) {
		return nil, "", fmt.Errorf("query %d outside the %d-token pass", t, len(ids))
	}
	if !full {
		ids = ids[:t+1]
	}
	k := &rowKeeper{layer: layer, head: h, query: t}
	set := &hooks.Set{}
	set.Stream(layer, k)
	if _, err := m.Forward([][]int{ids}, model.Options{Hooks: set, Threads: threads, AllowExtrapolation: true}); err != nil {
		return nil, "", err
	}
	if k.kind == "" {
		return nil, "", fmt.Errorf("layer %d (%s): %w: its token mixer streams none", layer, m.Config.LayerKinds()[layer], ErrNoRows)
	}
	if k.row == nil {
		return nil, "", fmt.Errorf("head %d: %w: layer %d (%s) has heads 0 … %d", h, ErrNoHead, layer, m.Config.LayerKinds()[layer], k.heads-1)
	}
	return k.row, k.kind, nil
}
