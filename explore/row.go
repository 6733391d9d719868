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
	"gorgonia.org/tensor"
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
// arrival order (a FIFO queue), sharing the pass of identical requests in
// flight, and tells how far the running pass is and where a request
// waits (status).
type rowRunner struct {
	f        *Folder
	opts     Options
	mu       sync.Mutex
	turn     *sync.Cond // signalled when the running pass ends, under mu
	queue    []*rowCall // the passes waiting for the model, in arrival order, under mu
	running  *rowCall   // the pass under way (nil: none), under mu
	inflight map[RowRequest]*rowCall
	version  uint64        // counts the changes of status, under mu
	changed  chan struct{} // closed (and replaced) at each change, under mu

	// layerDelay, when > 0, sleeps after each block of a pass (tests
	// only: a pass slow enough to watch its progress).
	layerDelay time.Duration

	loadOnce sync.Once
	m        *model.Model
	loadErr  error
}

type rowCall struct {
	q    RowRequest
	done chan struct{}
	row  *Row
	err  error

	started    time.Time // under rowRunner.mu, like the progress below
	layersDone int       // whole blocks the pass has run
	layers     int       // blocks the pass runs: 0 … layer (the last through its heads only)
	tokens     int       // positions the pass runs
}

func newRowRunner(f *Folder, o Options) *rowRunner {
	r := &rowRunner{f: f, opts: o, inflight: map[RowRequest]*rowCall{}, changed: make(chan struct{})}
	r.turn = sync.NewCond(&r.mu)
	return r
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
	c, ok := r.inflight[q]
	if !ok {
		if n := len(r.queue) + btoi(r.running != nil); n >= r.opts.MaxQueue {
			r.mu.Unlock()
			return nil, fmt.Errorf("%w: %d row passes already waiting (try again when they finish)", ErrBusy, n)
		}
		c = &rowCall{q: q, done: make(chan struct{}), layers: q.Layer + 1, tokens: q.Query + 1}
		if r.opts.FullPass {
			c.tokens = q.T
		}
		r.inflight[q] = c
		r.queue = append(r.queue, c)
		r.changedLocked()
		// The pass runs to its end even when the asking request gives up,
		// so that its row lands in the cache for the next ask.
		go r.run(c)
	}
	r.mu.Unlock()
	select {
	case <-c.done:
		return c.row, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("the row is still being computed (%w); ask again later: it will be cached", ctx.Err())
	}
}

// run waits for c's turn (the head of the queue, nothing running), runs
// its pass and hands the model to the next.
func (r *rowRunner) run(c *rowCall) {
	r.mu.Lock()
	for r.running != nil || r.queue[0] != c {
		r.turn.Wait()
	}
	r.queue = r.queue[1:]
	r.running, c.started = c, time.Now()
	r.changedLocked()
	r.mu.Unlock()
	c.row, c.err = r.compute(c)
	r.mu.Lock()
	r.running = nil
	delete(r.inflight, c.q)
	r.changedLocked()
	r.turn.Broadcast()
	r.mu.Unlock()
	close(c.done)
}

// changedLocked records a change of status and wakes its long polls.
func (r *rowRunner) changedLocked() {
	r.version++
	close(r.changed)
	r.changed = make(chan struct{})
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// RowStatus is /api/status: the row pass under way and how far it is,
// the passes waiting, and where one request stands.
type RowStatus struct {
	Running *RowRequest `json:"running"` // the request whose pass is under way (null: none)
	Seconds float64     `json:"seconds"` // how long it has run
	// LayersDone of Layers: the whole blocks the running pass has run, of
	// the blocks 0 … layer it runs (the last only through its heads, so
	// LayersDone stays below Layers until the row is there); Tokens the
	// positions it runs (query + 1, or T with --full-pass).
	LayersDone int          `json:"layers_done"`
	Layers     int          `json:"layers"`
	Tokens     int          `json:"tokens"`
	Queue      []RowRequest `json:"queue"`   // the passes waiting, in the order they will run
	Waiting    int          `json:"waiting"` // distinct passes queued or running
	Version    uint64       `json:"version"` // changes with every change of the above; ?since= waits for it
	// Request is where the request named by the status query stands
	// (absent when none is named).
	Request *RequestStatus `json:"request,omitempty"`
}

// RequestStatus is where one row request stands: "running", "queued" with
// Ahead passes to run before it (the running one included), "cached"
// (its row is in the cache) or "idle" (neither asked nor cached).
type RequestStatus struct {
	State string `json:"state"`
	Ahead int    `json:"ahead"`
}

// status returns the status; with since equal to the current version it
// first waits (until ctx ends) for a change, so that a page long-polls
// instead of polling on a timer. q, when not nil, is the request whose
// standing is wanted.
func (r *rowRunner) status(ctx context.Context, since *uint64, q *RowRequest) RowStatus {
	r.mu.Lock()
	if since != nil && *since == r.version {
		ch := r.changed
		r.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		r.mu.Lock()
	}
	defer r.mu.Unlock()
	st := RowStatus{Waiting: len(r.queue) + btoi(r.running != nil), Version: r.version, Queue: []RowRequest{}}
	if c := r.running; c != nil {
		st.Running = &c.q
		st.Seconds = time.Since(c.started).Seconds()
		st.LayersDone, st.Layers, st.Tokens = c.layersDone, c.layers, c.tokens
	}
	for _, c := range r.queue {
		st.Queue = append(st.Queue, c.q)
	}
	if q != nil {
		st.Request = &RequestStatus{State: "idle"}
		switch i := slices.IndexFunc(r.queue, func(c *rowCall) bool { return c.q == *q }); {
		case r.running != nil && r.running.q == *q:
			st.Request.State = "running"
		case i >= 0:
			st.Request.State, st.Request.Ahead = "queued", i+btoi(r.running != nil)
		default:
			if _, err := os.Stat(r.cachePath(*q)); err == nil {
				st.Request.State = "cached"
			}
		}
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

// compute runs c's pass and caches its row.
func (r *rowRunner) compute(c *rowCall) (*Row, error) {
	q, start := c.q, time.Now()
	m, err := r.load()
	if err != nil {
		return nil, err
	}
	ids, tok, err := r.f.passIDs(q.T, q.Sample)
	if err != nil {
		return nil, err
	}
	done := func(l int) {
		r.mu.Lock()
		c.layersDone = l + 1
		r.changedLocked()
		r.mu.Unlock()
		if r.layerDelay > 0 {
			time.Sleep(r.layerDelay)
		}
	}
	weights, kind, err := OneRow(m, ids, q.Layer, q.Head, q.Query, r.opts.FullPass, r.opts.Threads, done)
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
// tiling) and the pass costs t+1 tokens, not T. done, when not nil, is
// called after each whole block l the pass runs (blocks 0 … layer−1; layer
// itself runs only through its heads), for progress.
func OneRow(m *model.Model, ids []int, layer, h, t int, full bool, threads int, done func(l int)) ([]float32, string, error) {
	if t < 0 || t >= len(ids) {
		return nil, "", fmt.Errorf("query %d outside the %d-token pass", t, len(ids))
	}
	if !full {
		ids = ids[:t+1]
	}
	k := &rowKeeper{layer: layer, head: h, query: t}
	set := &hooks.Set{}
	set.Stream(layer, k)
	if done != nil {
		// a watch: it does not make the pass run further than the row needs
		set.Watch(hooks.ResidPost, func(_ string, l int, _ *tensor.Dense) error { done(l); return nil })
	}
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
