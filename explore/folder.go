package explore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
)

// CacheDir is the folder, inside the measurement folder, where computed
// attention rows are cached (one JSON file per row). It is the only thing
// explore ever writes into a measurement folder.
const CacheDir = "explore-cache"

// Folder is an opened measurement folder: what its manifest says about
// the model, the token stream and its passes, and the index of its
// per-query table.
type Folder struct {
	Dir      string
	Kind     string // "sweep", "gdn", "sinks", "massive", "experts" or "diag"
	Model    results.ModelInfo
	Source   results.SourceInfo
	Chunks   []results.Chunk
	Lengths  []int // as planned
	Samples  int
	Bucket   int // queries per stored row of the per-query table (1: per query)
	BOSToken int // prepended to every pass (−1: none)
	table    seriesTable
	grid     func(T int, metric, window string) (*Grid, error)
	windows  []string // the query windows grid accepts
	columns  string   // the grid's second axis ("head" unless a gridKind says otherwise)
	note     string   // what the folder's grid and series show, for /api/info
	noHeads  string   // why the grid's cells are not attention heads ("": they are)
	noRows   string   // why rows cannot be had whatever the model ("": they can)
	only     string   // the one file of Dir that /files/ serves ("": any; probe diag's CSV)
	metric   string   // the metric shown first ("": neff when the folder has it, else its first)
	src      source
}

// seriesTable is a folder's per-query table, indexed by series.
type seriesTable interface {
	metrics() []string
	lengths() []int
	samples(T int) []int
	has(k seriesKey) bool
	series(k seriesKey) ([]bucket, error)
	close() error
}

// Open opens a measurement folder. A folder without a measurement's
// manifest, an unfinished sweep without its tables, or a kind this
// version cannot read yet is refused with a message naming the folder and
// what is missing.
func Open(dir string) (*Folder, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, fmt.Errorf("explore: %s: %w", dir, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	if !st.IsDir() {
		if isDiagCSV(abs) {
			return openDiag(abs)
		}
		return nil, fmt.Errorf("explore: %s is a file, not a measurement folder nor probe diag's CSV (give the folder probe sweep, gdn, sinks, massive or experts wrote)", dir)
	}
	manPath := filepath.Join(abs, analysis.ManifestName(results.Shard{}))
	if _, err := os.Stat(manPath); errors.Is(err, os.ErrNotExist) {
		if _, err := os.Stat(filepath.Join(abs, results.GDNManifestName)); err == nil {
			return openGDN(dir, abs)
		}
		if kind := analysis.StreamKindOf(abs); kind != "" {
			if _, ok := gridKinds[kind]; ok {
				if _, err := os.Stat(filepath.Join(abs, analysis.StreamManifestName(kind, results.Shard{}))); err == nil {
					return openStream(dir, abs, kind)
				}
			}
			return nil, fmt.Errorf("explore: %s holds probe %s shards but no merged %s: run probe merge first", dir, kind, analysis.StreamManifestName(kind, results.Shard{}))
		}
		if shards, _ := filepath.Glob(filepath.Join(abs, "manifest-shard-*.json")); len(shards) > 0 {
			return nil, fmt.Errorf("explore: %s holds sweep shards (%s …) but no merged manifest.json: run probe merge first", dir, filepath.Base(shards[0]))
		}
		return nil, fmt.Errorf("explore: %s is not a measurement folder: no manifest.json (give the --out folder of probe sweep, gdn, sinks, massive or experts, or probe diag's CSV file)", dir)
	}
	man, err := analysis.ReadManifest(manPath)
	if err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	if !man.Complete {
		return nil, fmt.Errorf("explore: %s: the sweep is unfinished (%s): resume it with the same probe sweep command, then open it", dir, man.Error)
	}
	if !slices.Contains(man.Tables, "buckets.parquet") {
		return nil, fmt.Errorf("explore: %s: the sweep has no buckets.parquet (tables %v): re-run it with --format parquet", dir, man.Tables)
	}
	f := &Folder{Dir: abs, Kind: "sweep", Model: man.Model, Source: man.Source, Chunks: man.Chunks, Lengths: man.Sweep.Lengths,
		Samples: man.Sweep.Samples, Bucket: man.Sweep.Bucket, BOSToken: man.Sweep.BOSToken, windows: gridWindows, columns: "head"}
	if f.table, err = indexBuckets(filepath.Join(abs, "buckets.parquet")); err != nil {
		return nil, fmt.Errorf("explore: %w", err)
	}
	f.grid = f.headsGrid
	return f, nil
}

// Close releases the folder's open files.
func (f *Folder) Close() error { return f.table.close() }

// defaultMetric is the metric grid and series show when none is asked
// for: the folder kind's (gridKinds), else neff when the folder has it,
// else its first metric.
func (f *Folder) defaultMetric() string {
	ms := f.table.metrics()
	for _, m := range []string{f.metric, "neff"} {
		if m != "" && slices.Contains(ms, m) {
			return m
		}
	}
	if len(ms) == 0 {
		return ""
	}
	return ms[0]
}
