package analysis

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/internal/atomicfile"
)

// FindManifests returns the manifests of a sweep folder: manifest.json
// and/or manifest-shard-*.json.
func FindManifests(dir string) ([]*results.Manifest, []string, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "manifest-shard-*-of-*.json"))
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		paths = append([]string{filepath.Join(dir, "manifest.json")}, paths...)
	}
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("%s: no manifest.json or manifest-shard-*.json (not a probe sweep folder)", dir)
	}
	var ms []*results.Manifest
	for _, p := range paths {
		m, err := ReadManifest(p)
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, m)
	}
	return ms, paths, nil
}

// MergeOptions configure MergeStream.
type MergeOptions struct {
	Formats []string
	// Agg overrides the aggregation options of a sweep's shards' manifests
	// when non-nil.
	Agg        *results.AggOptions
	CLIOptions []results.Option
	Args       []string
}

// copyFileAtomic copies src to dst through a temporary file; it does
// nothing when they are the same file.
func copyFileAtomic(src, dst string) error {
	si, err := os.Stat(src)
	if err != nil {
		return err
	}
	if di, err := os.Stat(dst); err == nil && os.SameFile(si, di) {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, func(w io.Writer) error { _, err := io.Copy(w, in); return err })
}

// streamMeasure is what the engine knows of a measurement by its kind
// (RunRecord.Kind): its pass tables, and a manifest to read a folder's into
// with the function that writes the tables of the folder dir from its
// pass files.
type streamMeasure struct {
	kind   string
	tables []string
	finish func(dir string, opt MergeOptions) (StreamManifest, func() error)
}

// streamMeasures are the measurements whose folders MergeStream combines.
var streamMeasures = []streamMeasure{
	{"sweep", sweepTables, func(dir string, opt MergeOptions) (StreamManifest, func() error) {
		m := &results.Manifest{}
		return m, func() error {
			if opt.Agg != nil {
				m.Analysis = *opt.Agg
			}
			m.Conventions = conventions(m.Sweep, m.Analysis)
			m.Flags, m.LayersUsed = nil, nil
			t0 := time.Now()
			_, err := finishSweep(dir, m)
			m.Timings = results.Timings{Tables: time.Since(t0).Seconds()}
			for _, p := range m.Passes {
				m.Timings.Passes += p.Seconds
			}
			m.Timings.Total = m.Timings.Passes + m.Timings.Tables
			return err
		}
	}},
	{"gdn", gdnTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.GDNManifest{}
		return m, func() error { _, err := finishGDN(dir, m); return err }
	}},
	{"sinks", sinksTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.SinksManifest{}
		return m, func() error { _, _, err := finishSinks(dir, m); return err }
	}},
	{"massive", massiveTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.MassiveManifest{}
		return m, func() error { _, _, err := finishMassive(dir, m); return err }
	}},
	{"experts", expertsTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.ExpertsManifest{}
		return m, func() error { _, _, err := finishExperts(dir, m); return err }
	}},
	{"retrieval", retrievalTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.RetrievalManifest{}
		return m, func() error { _, err := finishRetrieval(dir, m); return err }
	}},
	{"diag", diagTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &DiagManifest{}
		return m, func() error { return finishDiag(dir, m) }
	}},
	{"ppl", pplTables, func(dir string, _ MergeOptions) (StreamManifest, func() error) {
		m := &results.PPLManifest{}
		return m, func() error { _, err := finishPPL(dir, m); return err }
	}},
}

// StreamKindOf returns the measurement whose manifests dir holds (""
// when none).
func StreamKindOf(dir string) string {
	for _, k := range streamMeasures {
		if m, _ := filepath.Glob(filepath.Join(dir, manifestBase(k.kind)+"*.json")); len(m) > 0 {
			return k.kind
		}
	}
	return ""
}

// MergeStream combines the pass files of the shard folders of one probe
// sweep, diag, gdn, sinks, massive, experts, retrieval or ppl run (--shard i/n
// with the same model, text and options) into out: the pass files are
// copied into out/passes, every pass must be there (a missing one is an
// error naming it and the shard that runs it), and the tables and
// manifest are those an unsharded run writes (in opt.Formats, default the
// shards'; a sweep's aggregated with opt.Agg when set). It returns the
// merged manifest.
func MergeStream(dirs []string, out string, opt MergeOptions) (StreamManifest, error) {
	start := time.Now()
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no folders to merge")
	}
	kind := StreamKindOf(dirs[0])
	if kind == "" {
		return nil, fmt.Errorf("%s: no sweep, diag, gdn, sinks, massive, experts, retrieval or ppl manifest", dirs[0])
	}
	i := slices.IndexFunc(streamMeasures, func(m streamMeasure) bool { return m.kind == kind })
	man, finish := streamMeasures[i].finish(out, opt)
	tables := streamMeasures[i].tables
	var base map[string]string
	var baseFile string
	for _, d := range dirs {
		paths, _ := filepath.Glob(filepath.Join(d, manifestBase(kind)+"*.json"))
		paths = slices.DeleteFunc(paths, func(p string) bool { return strings.HasSuffix(p, ".failed.json") })
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: no %s*.json (not a probe %s folder)", d, manifestBase(kind), kind)
		}
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				return nil, err
			}
			var raw map[string]json.RawMessage
			if err := json.Unmarshal(b, &raw); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			if _, ok := raw["kind"]; !ok && kind == "sweep" {
				return nil, fmt.Errorf("%s: %w", p, errOldSweep)
			}
			plan := planOf(raw)
			delete(plan, "shard.count")
			if base == nil {
				if err := json.Unmarshal(b, man); err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
				base, baseFile = plan, p
				continue
			}
			if diff := planDiffs(plan, base); len(diff) > 0 {
				return nil, fmt.Errorf("%s and %s are not shards of one run: %s", p, baseFile, strings.Join(diff, "; "))
			}
		}
	}
	rec := man.Record()
	if err := os.MkdirAll(filepath.Join(out, "passes"), 0o755); err != nil {
		return nil, err
	}
	var missing []string
	rec.Passes = []results.StreamPass{}
	for i, c := range rec.Chunks {
		src := ""
		var pass results.StreamPass
		for _, d := range dirs {
			ok := true
			for _, t := range tables {
				p, err := readStreamPass(streamPassPath(d, t, c), t)
				if err != nil {
					ok = false
					break
				}
				pass = p
			}
			if ok {
				src = d
				break
			}
		}
		if src == "" {
			missing = append(missing, missingPass(c, i, rec.Shard))
			continue
		}
		for _, t := range tables {
			if err := copyFileAtomic(streamPassPath(src, t, c), streamPassPath(out, t, c)); err != nil {
				return nil, err
			}
		}
		rec.Passes = append(rec.Passes, pass)
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%d of %d passes have no complete files in %s: %s", len(missing), len(rec.Chunks),
			strings.Join(dirs, ", "), strings.Join(missing, ", "))
	}
	rec.Tool = Tool()
	rec.Created = time.Now().UTC().Format(time.RFC3339)
	rec.Shard = results.Shard{Index: 0, Count: 1}
	rec.Error, rec.Reused, rec.Notes, rec.Complete = "", nil, nil, false
	rec.MergedFrom = dirs
	rec.Args, rec.CLIOptions = opt.Args, opt.CLIOptions
	if len(opt.Formats) > 0 {
		rec.Formats = opt.Formats
	}
	if err := finish(); err != nil {
		return nil, err
	}
	rec.Complete = true
	rec.Seconds = time.Since(start).Seconds()
	return man, writeJSON(filepath.Join(out, StreamManifestName(kind, rec.Shard)), man)
}

// missingPass names pass i (chunk c) that no shard folder holds, with the
// shard of s that runs it.
func missingPass(c results.Chunk, i int, s results.Shard) string {
	if n := s.Count; n > 1 {
		return fmt.Sprintf("%s (shard %d/%d)", chunkName(c), i%n, n)
	}
	return chunkName(c)
}
