package analysis

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"
	"gorgonia.org/tensor"

	"github.com/filterlens/probe/hooks"
	"github.com/filterlens/probe/model"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// StreamManifest is a stream command's manifest (GDNManifest,
// SinksManifest, MassiveManifest): a RunRecord plus the command's fields.
type StreamManifest interface{ Record() *results.RunRecord }

// StreamManifestName is the manifest's file name of a run of measurement
// kind (sweep, diag, gdn, sinks, massive, experts, retrieval or ppl) or of one
// shard of it: <kind>_manifest.json, a sweep's manifest.json (ManifestName,
// as before it ran on the engine).
func StreamManifestName(kind string, s results.Shard) string {
	return manifestFile(manifestBase(kind), s)
}

// manifestBase is the manifest's file name of a run of kind without the
// shard and ".json".
func manifestBase(kind string) string {
	if kind == "sweep" {
		return "manifest"
	}
	return kind + "_manifest"
}

// planKeys are the option fields that only choose the chunks or say
// whether to go on; they are not in a StreamKey.
var planKeys = []string{"lengths", "samples", "disjoint", "placement", "seed", "offset", "allow_extrapolation"}

// tableKeys are, per command, the option fields that only shape the
// tables written from the pass files (sinks: the sink rate's thresholds
// and layer groups; retrieval: which copy steps count and the score
// threshold; ppl: the intervals, the training length, and the variants,
// each of whose passes names its own in its key; diag: the CSV header's
// names, and, as the sweep's key leaves it out, whether to go on past
// non-finite rows, which a finished pass does not depend on); they are not
// in a StreamKey either, so that --force rewrites the tables from the
// finished passes.
var tableKeys = map[string][]string{"sinks": {"eps", "split_local"}, "retrieval": {"steps", "above"},
	"ppl": {"variants", "train_length", "ci_level"}, "diag": {"legacy_names", "on_nonfinite"}}

// passOptions is the Options of a StreamKey of command kind: opts's JSON
// without planKeys and the kind's tableKeys.
func passOptions(kind string, opts any) json.RawMessage {
	b, _ := json.Marshal(opts)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return b
	}
	for _, k := range append(slices.Clone(planKeys), tableKeys[kind]...) {
		delete(m, k)
	}
	b, _ = json.Marshal(m)
	return b
}

// streamPassPath is dir/passes/T<T>-s<sample>.<table>.parquet, with the
// chunk's pass (its "/" as "-") and a "-" before it when it has one.
func streamPassPath(dir, table string, c results.Chunk) string {
	prefix := ""
	if c.Pass != "" {
		prefix = strings.ReplaceAll(c.Pass, "/", "-") + "-"
	}
	return filepath.Join(dir, "passes", fmt.Sprintf("%sT%d-s%d.%s.parquet", prefix, c.T, c.Sample, table))
}

// passDigester is a manifest whose passes run more than one model (ppl):
// PassDigest is the ModelInfo.Digest of chunk c's model.
type passDigester interface{ PassDigest(c results.Chunk) string }

// digestOf is the model digest of chunk c's pass key in man's run.
func digestOf(man StreamManifest, c results.Chunk) string {
	if d, ok := man.(passDigester); ok {
		return d.PassDigest(c)
	}
	return man.Record().Model.Digest
}

// passTable is one table of a pass, ready to be written as a pass file.
type passTable struct {
	name  string
	rows  int64
	write func(w io.Writer, meta map[string]string) error
	// writeAll writes the rows as the finished table dir/name.<format>.
	writeAll func(dir string, formats []string) error
}

// tableOf makes rows a passTable (or, through writeAll, a finished table).
func tableOf[T any](name string, rows []T) passTable {
	return passTable{name, int64(len(rows)),
		func(w io.Writer, meta map[string]string) error { return writeParquet(w, rows, meta) },
		func(dir string, formats []string) error { return writeTable(dir, name, rows, formats) }}
}

// readStreamPass reads and checks one pass file: its record and every
// page. It fails with an error wrapping errIncomplete when the file is not
// whole.
func readStreamPass(path, table string) (results.StreamPass, error) {
	return readPass(path, table, func(pf *parquet.File) (int64, error) {
		r := parquet.NewReader(pf)
		defer r.Close()
		buf := make([]parquet.Row, 512)
		var read int64
		for {
			n, err := r.ReadRows(buf)
			read += int64(n)
			if errors.Is(err, io.EOF) {
				return read, nil
			}
			if err != nil {
				return read, err
			}
		}
	})
}

// readPass opens the pass file at path once, checks its record (hash and
// the row count of table) and reads every page with read (a damaged page,
// CRC mismatch, makes the file incomplete too), which returns the rows it
// read: they must be the record's. Errors wrap errIncomplete where the
// file is not whole.
func readPass(path, table string, read func(*parquet.File) (int64, error)) (results.StreamPass, error) {
	var rec results.StreamPass
	f, pf, err := openPassFile(path, &rec)
	if err != nil {
		return rec, err
	}
	defer f.Close()
	if rec.Hash != rec.Key.Hash() {
		return rec, fmt.Errorf("%s: %w: record hash %s does not match its key", path, errIncomplete, rec.Hash)
	}
	if n, ok := rec.Rows[table]; !ok || pf.NumRows() != n {
		return rec, fmt.Errorf("%s: %w: %d rows, the record says %d", path, errIncomplete, pf.NumRows(), n)
	}
	n, err := read(pf)
	if err != nil {
		return rec, fmt.Errorf("%s: %w: %v", path, errIncomplete, err)
	}
	if n != rec.Rows[table] {
		return rec, fmt.Errorf("%s: %w: read %d rows, the record says %d", path, errIncomplete, n, rec.Rows[table])
	}
	return rec, nil
}

// readPassRows reads the rows of one table of chunk c's pass in dir,
// checking that the file belongs to the run described by man (its key
// without the token digest, which only the stream gives) and that it is
// whole — one reading of the file: its pages decoded as T rows.
func readPassRows[T any](dir, table string, man StreamManifest, opts any, c results.Chunk) ([]T, error) {
	path := streamPassPath(dir, table, c)
	var rows []T
	got, err := readPass(path, table, func(pf *parquet.File) (int64, error) {
		r := parquet.NewGenericReader[T](pf)
		defer r.Close()
		rows = make([]T, pf.NumRows())
		var read int
		for read < len(rows) {
			n, err := r.Read(rows[read:])
			read += n
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return int64(read), err
			}
		}
		rows = rows[:read]
		return int64(read), nil
	})
	if err := passOfRun(path, got, err, man, opts, c); err != nil {
		return nil, err
	}
	return rows, nil
}

// checkPassFile returns the path of one table of chunk c's pass in dir
// after checking the file as readPassRows does.
func checkPassFile(dir, table string, man StreamManifest, opts any, c results.Chunk) (string, error) {
	path := streamPassPath(dir, table, c)
	got, err := readStreamPass(path, table)
	return path, passOfRun(path, got, err, man, opts, c)
}

// passOfRun says why the pass file at path, read as got with err, is not
// chunk c's pass of the run described by man: missing, incomplete, or
// another run's.
func passOfRun(path string, got results.StreamPass, err error, man StreamManifest, opts any, c results.Chunk) error {
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("pass (%s) has no file %s: run its shard (or the run) again", chunkName(c), path)
	}
	if err != nil {
		return err
	}
	want := streamKey(man.Record().Kind, digestOf(man, c), opts, c, got.Key.Tokens)
	if got.Hash != want.Hash() {
		return fmt.Errorf("%s does not belong to this run: %s", path, strings.Join(keyDiff(want, got.Key), "; "))
	}
	return nil
}

func streamKey(kind, model string, opts any, c results.Chunk, tokens string) results.StreamKey {
	return results.StreamKey{Format: formatVersion, Kind: kind, Model: model, T: c.T, Sample: c.Sample, Start: c.Start, End: c.End,
		Tokens: tokens, Options: passOptions(kind, opts), Pass: c.Pass}
}

// shardChunks returns the chunks shard s runs: i, i+n, i+2n, …, and
// those every shard runs (shared, when set: passes whose results the
// others need, as ppl's calibration).
func shardChunks(chunks []results.Chunk, s results.Shard, shared func(results.Chunk) bool) []results.Chunk {
	var mine []results.Chunk
	for i, c := range chunks {
		if s.Count <= 1 || i%s.Count == s.Index || (shared != nil && shared(c)) {
			mine = append(mine, c)
		}
	}
	return mine
}

// recordFailure writes man, which records err, to path; when the manifest
// there records a finished run (whose tables stay valid), to
// <path>.failed.json beside it instead. It returns err.
func recordFailure(path string, man any, err error) error {
	var old struct {
		Complete bool `json:"complete"`
	}
	if b, rerr := os.ReadFile(path); rerr == nil && json.Unmarshal(b, &old) == nil && old.Complete {
		path = strings.TrimSuffix(path, ".json") + ".failed.json"
	}
	if werr := writeJSON(path, man); werr != nil {
		return fmt.Errorf("%w (and writing the manifest failed: %v)", err, werr)
	}
	return err
}

// measurement is one diagnostic on the run engine: the passes of its
// run's chunks and the tables written from their files. It holds what its
// passes need (the loaded model, the manifest, the options); runStream
// keys, resumes, shards, stops and reports the passes. As io.Copy finds
// WriterTo beside Writer, runStream finds by type assertion the optional
// interfaces below (passIDer, memoryChecker, multiForward, multiModel) for
// what only some measurements need.
type measurement interface {
	// tables are the names of a pass's tables, in the order pass returns
	// them.
	tables() []string
	// pass runs chunk c and returns its tables, calling watch on the
	// hooks of each of its forward passes before it runs (the progress
	// follows their layers).
	pass(c results.Chunk, watch func(*hooks.Set)) ([]passTable, error)
	// finish writes the run's tables from the pass files of every chunk;
	// runStream calls it after the last pass of an unsharded run.
	finish() error
}

// passIDer is a measurement whose passes do not read the chunk's span of
// the spec's Stream (the sweep: a BOS token first; retrieval: the copy
// task): ids are chunk c's token ids, whose digest the pass key holds.
type passIDer interface{ ids(c results.Chunk) []int }

// memoryChecker is a measurement whose pass holds more than the model's
// forward pass (the sweep and diag: the Collector's results):
// checkMemory refuses a length-T pass that cannot fit, before the first.
type memoryChecker interface{ checkMemory(T int) error }

// multiForward is a measurement that runs forwards forward passes per
// chunk (massive: the plain one and each intervention), each counted by
// the progress.
type multiForward interface{ forwards() int }

// rowsMeasurement is a measurement whose finish writes two tables and
// keeps their rows (finishedRows) for its Run to return (experts, massive,
// sinks).
type rowsMeasurement[A, B any] interface {
	measurement
	rows() ([]A, []B)
}

// finishedRows keeps the rows of the two tables a measurement's finish
// writes from the pass files; it stays empty for a shard, whose finish
// does not run.
type finishedRows[A, B any] struct {
	first  []A
	second []B
}

// keep records the rows a finish function (finishExperts, finishMassive,
// finishSinks) returns and passes on its error.
func (t *finishedRows[A, B]) keep(a []A, b []B, err error) error {
	t.first, t.second = a, b
	return err
}

func (t *finishedRows[A, B]) rows() ([]A, []B) { return t.first, t.second }

// runRows runs ms as runStream does and returns man with the rows of the
// two tables ms's finish wrote (none for a shard), or man and the error
// (no rows).
func runRows[M StreamManifest, A, B any](r *RunSpec, man M, opts any, m *model.Model, ms rowsMeasurement[A, B]) (M, []A, []B, error) {
	if err := runStream(r, man, opts, m, ms); err != nil {
		return man, nil, nil, err
	}
	a, b := ms.rows()
	return man, a, b, nil
}

// multiModel is a measurement whose chunks run different models (ppl):
// prepare loads chunk c's model before its key, which holds its digest,
// is made; config and label give that model's configuration and the
// chunk's Progress.Label; shared says which chunks every shard runs
// (shardChunks).
type multiModel interface {
	prepare(c results.Chunk) error
	config(c results.Chunk) *model.Config
	label(c results.Chunk) string
	shared(c results.Chunk) bool
}

// runStream runs the passes of man's shard that have no finished pass
// files in out (finished ones with the same key are kept, incomplete ones
// run again, ones made with another key are an error naming the file and
// the fields), then for an unsharded run writes the tables. The manifest
// is written first, marked incomplete (unless the folder holds a finished
// run of the same plan, whose tables stay valid until new ones are
// written), and completed at the end; on a failure it records the error.
// A folder whose manifest records another plan is refused unless force.
// The passes are measurement ms's, keyed with opts (the measurement's
// options, the manifest's under its kind); m is the model of every pass
// (nil for a multiModel), whose memory for the longest pass is checked
// before the first (model.Model.CheckMemory, unless ms is a memoryChecker)
// and whose layers the progress counts.
func runStream(r *RunSpec, man StreamManifest, opts any, m *model.Model, ms measurement) error {
	start := time.Now()
	rec := man.Record()
	path := filepath.Join(r.Out, StreamManifestName(rec.Kind, rec.Shard))
	ids := func(c results.Chunk) []int { return r.Stream[c.Start:c.End] }
	if p, ok := ms.(passIDer); ok {
		ids = p.ids
	}
	mm, multi := ms.(multiModel)
	fail := func(err error) error {
		rec.Error = err.Error()
		rec.Seconds = time.Since(start).Seconds()
		return recordFailure(path, man, err)
	}
	if !r.Force {
		if err := samePlan(r.Out, man); err != nil {
			return err
		}
	}
	// the manifest first, then passes/: a folder with pass files always
	// has a manifest that names its kind, so that a run killed at any
	// moment resumes without --force
	var old struct {
		Complete bool `json:"complete"`
	}
	if b, err := os.ReadFile(path); err != nil || json.Unmarshal(b, &old) != nil || !old.Complete {
		if err := os.MkdirAll(r.Out, 0o755); err != nil {
			return err
		}
		if err := writeJSON(path, man); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(r.Out, "passes"), 0o755); err != nil {
		return err
	}
	rec.Passes = []results.StreamPass{}
	var shared func(results.Chunk) bool
	if multi {
		shared = mm.shared
	}
	mine := shardChunks(rec.Chunks, rec.Shard, shared)
	var checkMemory func(T int) error
	if mc, ok := ms.(memoryChecker); ok {
		checkMemory = mc.checkMemory
	} else if m != nil {
		checkMemory = func(T int) error { return m.CheckMemory(1, T, model.Options{Threads: r.Threads}, 0) }
	}
	if T := longestT(mine); T > 0 && checkMemory != nil {
		if err := checkMemory(T); err != nil {
			return fail(fmt.Errorf("the longest pass (T=%d): %w", T, err))
		}
	}
	pr := newStreamProgress(r.Progress, m, ms, mine, start)
	for i, c := range mine {
		if multi {
			if err := mm.prepare(c); err != nil {
				return fail(fmt.Errorf("%s: %w", chunkName(c), err))
			}
		}
		key := streamKey(rec.Kind, digestOf(man, c), opts, c, TokenDigest(ids(c)))
		done, note, err := finishedPass(r.Out, ms.tables(), c, key)
		if err != nil {
			return fail(err)
		}
		if note != "" {
			rec.Notes = append(rec.Notes, note)
		}
		if done != nil {
			rec.Passes = append(rec.Passes, *done)
			rec.Reused = append(rec.Reused, chunkName(c))
			pr.reused(i, c)
			continue
		}
		select {
		case <-r.Stop:
			return fail(fmt.Errorf("probe %s %w: %d of %d passes finished", rec.Kind, ErrStopped, len(rec.Passes), len(mine)))
		default:
		}
		t0 := time.Now()
		tables, err := ms.pass(c, pr.watch(i, c))
		if err != nil {
			return fail(fmt.Errorf("%s: %w", chunkName(c), err))
		}
		pr.done(c)
		p := results.StreamPass{Key: key, Hash: key.Hash(), Rows: map[string]int64{}, Seconds: time.Since(t0).Seconds()}
		for _, t := range tables {
			p.Rows[t.name] = t.rows
		}
		meta, err := json.Marshal(p)
		if err != nil {
			return fail(err)
		}
		for _, t := range tables {
			err := atomicfile.Write(streamPassPath(r.Out, t.name, c), func(w io.Writer) error {
				return t.write(w, map[string]string{passMetaKey: string(meta)})
			})
			if err != nil {
				return fail(err)
			}
		}
		rec.Passes = append(rec.Passes, p)
	}
	if rec.Shard.Count <= 1 {
		if err := ms.finish(); err != nil {
			return fail(err)
		}
	}
	rec.Complete = true
	rec.Seconds = time.Since(start).Seconds()
	return writeJSON(path, man)
}

// streamProgress reports a run's progress (RunSpec.Progress): every
// pass's forward passes count layers·forwards steps of its model, and the
// work of a pass is passCost times its forward passes.
type streamProgress struct {
	report   func(Progress)
	start    time.Time
	forwards int
	config   func(results.Chunk) *model.Config
	label    func(results.Chunk) string
	p        Progress
}

// newStreamProgress reports to report (nil: no progress) the passes of ms
// over mine, with model m (a multiModel's own per chunk).
func newStreamProgress(report func(Progress), m *model.Model, ms measurement, mine []results.Chunk, start time.Time) *streamProgress {
	sp := &streamProgress{start: start, forwards: 1, label: func(results.Chunk) string { return "" }}
	if f, ok := ms.(multiForward); ok {
		sp.forwards = max(1, f.forwards())
	}
	if mm, ok := ms.(multiModel); ok {
		sp.config, sp.label = mm.config, mm.label
	} else if m != nil {
		sp.config = func(results.Chunk) *model.Config { return &m.Config }
	}
	if sp.config == nil || report == nil {
		return sp // report nil: no progress
	}
	sp.report = report
	sp.p = Progress{Passes: len(mine)}
	for _, c := range mine {
		sp.p.WorkLeft += sp.cost(c)
	}
	return sp
}

func (sp *streamProgress) cost(c results.Chunk) float64 {
	return float64(sp.forwards) * passCost(sp.config(c), c.T)
}

func (sp *streamProgress) send() {
	sp.p.Elapsed = time.Since(sp.start)
	sp.report(sp.p)
}

// at makes chunk c (the i-th) the pass reported, at its first layer.
func (sp *streamProgress) at(i int, c results.Chunk, reused bool) {
	sp.p.Pass, sp.p.T, sp.p.Sample, sp.p.Label, sp.p.Layer, sp.p.Layers = i+1, c.T, c.Sample, sp.label(c), 0, sp.config(c).Layers*sp.forwards
	sp.p.Reused, sp.p.Done = reused, reused
}

// reused reports chunk c (the i-th) as already finished.
func (sp *streamProgress) reused(i int, c results.Chunk) {
	if sp.report == nil {
		return
	}
	sp.at(i, c, true)
	sp.p.WorkLeft -= sp.cost(c)
	sp.send()
}

// watch returns the hook installer of chunk c's forward passes (the i-th
// chunk): each layer's resid_post that a pass reaches advances the progress
// (a watch: it takes no pass further than its readers), done the rest.
func (sp *streamProgress) watch(i int, c results.Chunk) func(*hooks.Set) {
	if sp.report == nil {
		return func(*hooks.Set) {}
	}
	sp.at(i, c, false)
	sp.send()
	step := sp.cost(c) / float64(sp.p.Layers)
	return func(hs *hooks.Set) {
		hs.Watch(hooks.ResidPost, func(string, int, *tensor.Dense) error {
			sp.p.Layer = min(sp.p.Layer+1, sp.p.Layers)
			sp.p.Work += step
			sp.p.WorkLeft -= step
			sp.send()
			return nil
		})
	}
}

// done reports chunk c's pass as finished.
func (sp *streamProgress) done(c results.Chunk) {
	if sp.report == nil {
		return
	}
	left := float64(sp.p.Layers-sp.p.Layer) * sp.cost(c) / float64(sp.p.Layers) // forward passes that skipped the hook
	sp.p.Work, sp.p.WorkLeft = sp.p.Work+left, sp.p.WorkLeft-left
	sp.p.Layer, sp.p.Done, sp.p.Tokens = sp.p.Layers, true, sp.p.Tokens+int64(c.T)
	sp.send()
}

// finishedPass returns the record of chunk c's pass when every one of its
// files in dir is whole and made with key; nil (and a note when a file was
// incomplete) when the pass must run; an error when a file was made with
// another key, which is never overwritten.
func finishedPass(dir string, tables []string, c results.Chunk, key results.StreamKey) (*results.StreamPass, string, error) {
	var rec results.StreamPass
	for _, t := range tables {
		path := streamPassPath(dir, t, c)
		got, err := readStreamPass(path, t)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, "", nil
		case errors.Is(err, errIncomplete):
			return nil, fmt.Sprintf("%s was incomplete (%v) and was run again", path, err), nil
		case err != nil:
			return nil, "", err
		case got.Hash != key.Hash():
			return nil, "", fmt.Errorf("%s was made from another model, text or options (%s); use another --out or remove the file",
				path, strings.Join(keyDiff(key, got.Key), "; "))
		}
		rec = got
	}
	return &rec, "", nil
}

// planSections are, per kind, the manifest sections beside its options
// that are part of its plan (the sweep's aggregation options), the option
// fields that are not (the sweep's: how its lengths were spelled, whether
// to go on past non-finite values or max_position_embeddings, the tokens
// of its bf16 deviation; so that a stopped sweep resumes with
// --on-nonfinite flag), and what a refusal of another plan adds (%s: the
// folder).
var planSections = map[string]struct {
	more, skip []string
	hint       string
}{
	"sweep": {[]string{"analysis"}, []string{"lengths_arg", "on_nonfinite", "allow_extrapolation", "deviation_tokens"},
		"; to aggregate its passes with other analysis options use probe summarize %s"},
	// ppl recorded no allow_extrapolation before its options embedded
	// StreamPlan; such folders keep resuming
	"ppl": {skip: []string{"allow_extrapolation"}},
	// as the sweep: a diag stopped at a non-finite row resumes with
	// --on-nonfinite flag
	"diag": {skip: []string{"on_nonfinite"}},
}

// planOf is the part of a stream manifest that decides its passes and
// tables: the command, model, token stream, shard count, chunks and
// options (under the command's name, and planSections), as flattened
// JSON.
func planOf(man any) map[string]string {
	b, _ := json.Marshal(man)
	var all map[string]json.RawMessage
	json.Unmarshal(b, &all)
	var kind string
	json.Unmarshal(all["kind"], &kind)
	var sub struct {
		Model  struct{ Digest string } `json:"model"`
		Source struct{ Digest string } `json:"source"`
		Shard  struct{ Count int }     `json:"shard"`
	}
	json.Unmarshal(b, &sub)
	plan := map[string]string{"kind": kind, "model.digest": sub.Model.Digest, "source.digest": sub.Source.Digest,
		"shard.count": fmt.Sprint(max(sub.Shard.Count, 1)), "chunks": string(all["chunks"])}
	flattenJSON(plan, kind, all[kind])
	for _, k := range planSections[kind].more {
		flattenJSON(plan, k, all[k])
	}
	for _, k := range planSections[kind].skip {
		delete(plan, kind+"."+k)
	}
	return plan
}

// planDiffs names the plan fields in which a and b differ.
func planDiffs(a, b map[string]string) []string {
	var diff []string
	for k, v := range a {
		if b[k] != v {
			diff = append(diff, fmt.Sprintf("%s (%s here, %s in the folder)", k, v, b[k]))
		}
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s (none here, %s in the folder)", k, v))
		}
	}
	slices.Sort(diff)
	return diff
}

// samePlan refuses a folder whose manifests of man's kind record another
// plan: a re-run of the same plan resumes it (or rewrites the same
// tables), another plan would replace the tables a user made.
func samePlan(out string, man StreamManifest) error {
	kind := man.Record().Kind
	paths, _ := filepath.Glob(filepath.Join(out, manifestBase(kind)+"*.json"))
	now := planOf(man)
	for _, p := range paths {
		if strings.HasSuffix(p, ".failed.json") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var old map[string]json.RawMessage
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("%s: %w; choose another --out, or pass --force to run there anyway", p, err)
		}
		if _, ok := old["kind"]; !ok && kind == "sweep" {
			return fmt.Errorf("--out %s holds %w", out, errOldSweep)
		}
		if _, ok := old["passes"]; !ok {
			return fmt.Errorf("--out %s holds a probe %s run (%s) written before it kept pass files, which cannot be resumed: re-run with --force to replace its tables, or choose a new --out",
				out, kind, filepath.Base(p))
		}
		if diff := planDiffs(now, planOf(old)); len(diff) > 0 {
			hint := ""
			if h := planSections[kind].hint; h != "" {
				hint = fmt.Sprintf(h, out)
			}
			return fmt.Errorf("--out %s holds a probe %s run (%s) with another plan:\n  %s\nre-run with the folder's options to resume or reuse it, choose another --out, or pass --force to replace its tables (finished passes made with other options are then an error, never overwritten)%s",
				out, kind, filepath.Base(p), strings.Join(diff, "\n  "), hint)
		}
	}
	return nil
}

// RunSpec is what every measurement run on the stream engine (runStream)
// shares: the model, the token stream, the output folder and formats, the
// workers, the shard, how to stop and report, and what to record. GDNRun,
// SinksRun, MassiveRun, ExpertsRun and RetrievalRun embed it beside their
// options.
type RunSpec struct {
	Dir    string // checkpoint folder
	Load   model.LoadOptions
	Source results.SourceInfo
	Stream []int  // the token stream the chunks are cut from (none: the measurement makes its own ids)
	Out    string // output folder: manifest, tables and passes/
	// Formats of the tables (default Parquet and CSV); Threads are the
	// attention and diagnostics workers (0: GOMAXPROCS).
	Formats []string
	Threads int
	// Shard runs passes i, i+n, … only (combined by MergeStream); Force
	// runs into a folder that records another plan.
	Shard results.Shard
	Force bool
	// Stop, when closed, stops the run before its next pass: Run returns
	// an error wrapping ErrStopped, the finished passes kept.
	Stop <-chan struct{}
	// Progress, when set, is called as the run advances (layer by layer).
	Progress func(Progress)
	// CLIOptions and Args are the command line, for the manifest.
	CLIOptions []results.Option
	Args       []string
	// DeviationTokens: with a model loaded for bf16 arithmetic, the first
	// DeviationTokens tokens of the first chunk also run in float32
	// (RunRecord.Deviation; 0: not measured).
	DeviationTokens int
}

// defaultStreamPlan is the stream measurements' default plan: one sample
// per length, every chunk disjoint, back to back from the stream's start.
var defaultStreamPlan = results.StreamPlan{Samples: 1, Disjoint: DisjointAll, Placement: PlaceSequential, Seed: 1}

// defaults fills the spec's defaults (formats Parquet and CSV, threads
// GOMAXPROCS, shard 0/1) and checks its shard.
func (s *RunSpec) defaults() error {
	if s.Shard.Count == 0 {
		s.Shard = results.Shard{Index: 0, Count: 1}
	}
	if s.Shard.Index < 0 || s.Shard.Index >= s.Shard.Count {
		return fmt.Errorf("shard %v: want 0 ≤ i < n", s.Shard)
	}
	if len(s.Formats) == 0 {
		s.Formats = []string{FormatParquet, FormatCSV}
	}
	if s.Threads <= 0 {
		s.Threads = runtime.GOMAXPROCS(0)
	}
	return nil
}

// load fills the spec's defaults, loads the model and returns it with
// the record of a run of measurement kind over chunks.
func (s *RunSpec) load(kind string, chunks []results.Chunk) (*model.Model, results.RunRecord, error) {
	if err := s.defaults(); err != nil {
		return nil, results.RunRecord{}, err
	}
	m, err := model.Load(s.Dir, s.Load)
	if err != nil {
		return nil, results.RunRecord{}, err
	}
	info, err := DescribeModel(m)
	if err != nil {
		return nil, results.RunRecord{}, err
	}
	return m, results.RunRecord{Kind: kind, Tool: Tool(), Created: time.Now().UTC().Format(time.RFC3339), Args: s.Args, Shard: s.Shard,
		Model: info, Source: s.Source, Chunks: chunks, Passes: []results.StreamPass{}, Threads: s.Threads, Formats: s.Formats,
		CLIOptions: s.CLIOptions}, nil
}

// open fills the spec's defaults, plans the chunks of measurement kind
// (each planned length holds extra stream tokens beyond T: massive's last
// target; the chunks' T is the planned length minus extra), loads the
// model, checks the tokens against its vocabulary, and returns the model
// and the run's record, with the bf16 deviation (streamDeviation).
func (s *RunSpec) open(kind string, p results.StreamPlan, extra int) (*model.Model, results.RunRecord, error) {
	var rec results.RunRecord
	plan := ChunkOptions{Lengths: slices.Clone(p.Lengths), Samples: p.Samples, Disjoint: p.Disjoint, Placement: p.Placement, Seed: p.Seed, Offset: p.Offset}
	for i := range plan.Lengths {
		plan.Lengths[i] += extra
	}
	chunks, err := PlanChunks(len(s.Stream), plan)
	if err != nil {
		if extra > 0 {
			return nil, rec, fmt.Errorf("%s: %w (a chunk is T + %d tokens)", s.Source.File.Path, err, extra)
		}
		return nil, rec, fmt.Errorf("%s: %w", s.Source.File.Path, err)
	}
	for i := range chunks {
		chunks[i].T -= extra
	}
	m, rec, err := s.load(kind, chunks)
	if err != nil {
		return nil, rec, err
	}
	for _, c := range chunks {
		for j, id := range s.Stream[c.Start:c.End] {
			if id < 0 || id >= m.Config.Vocab {
				return nil, rec, fmt.Errorf("%s: token %d at stream position %d is outside the model's vocabulary [0, %d)",
					s.Source.File.Path, id, c.Start+j, m.Config.Vocab)
			}
		}
	}
	if rec.Deviation, err = streamDeviation(m, s.Stream, chunks, s.DeviationTokens, p.AllowExtrapolation, s.Threads); err != nil {
		return nil, rec, err
	}
	return m, rec, nil
}

// writeTables writes each table of a finished run in the run's formats and
// lists them in its record.
func writeTables(r *results.RunRecord, dir string, tables ...passTable) error {
	r.Tables = nil
	for _, t := range tables {
		if err := t.writeAll(dir, r.Formats); err != nil {
			return err
		}
		for _, f := range r.Formats {
			r.Tables = append(r.Tables, t.name+"."+f)
		}
	}
	return nil
}
