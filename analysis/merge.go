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

	"github.com/filterlens/probe/internal/atomicfile"
)

// FindManifests returns the manifests of a sweep folder: manifest.json
// and/or manifest-shard-*.json.
func FindManifests(dir string) ([]*Manifest, []string, error) {
	paths, _ := filepath.Glob(filepath.Join(dir, "manifest-shard-*-of-*.json"))
	if _, err := os.Stat(filepath.Join(dir, "manifest.json")); err == nil {
		paths = append([]string{filepath.Join(dir, "manifest.json")}, paths...)
	}
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("%s: no manifest.json or manifest-shard-*.json (not a probe sweep folder)", dir)
	}
	var ms []*Manifest
	for _, p := range paths {
		m, err := ReadManifest(p)
		if err != nil {
			return nil, nil, err
		}
		ms = append(ms, m)
	}
	return ms, paths, nil
}

// sameSweep reports why two manifests do not describe the same sweep, or
// "" when they do.
func sameSweep(a, b *Manifest) string {
	eq := func(x, y any) bool {
		jx, _ := json.Marshal(x)
		jy, _ := json.Marshal(y)
		return string(jx) == string(jy)
	}
	switch {
	case a.Model.Digest != b.Model.Digest:
		return fmt.Sprintf("model digest %s vs %s", a.Model.Digest, b.Model.Digest)
	case a.Source.Digest != b.Source.Digest:
		return fmt.Sprintf("token stream digest %s vs %s", a.Source.Digest, b.Source.Digest)
	case !eq(a.Sweep, b.Sweep):
		return "sweep options differ"
	case !eq(a.Chunks, b.Chunks):
		return "chunk offsets differ"
	}
	return ""
}

// MergeOptions configure Merge.
type MergeOptions struct {
	Formats []string
	// Agg overrides the aggregation options of the shards' manifests when
	// non-nil.
	Agg        *AggOptions
	CLIOptions []Option
	Args       []string
}

// Merge combines the pass files of shard folders (made by sweep --shard
// i/n with the same model, text and options) into out: it copies the pass
// files into out/passes, checks that every pass of the sweep is there, and
// writes the same tables and summary as an unsharded run would, plus a
// manifest.json. A missing pass is an error naming it and the shard that
// owns it.
func Merge(dirs []string, out string, opt MergeOptions) (*Manifest, error) {
	start := time.Now()
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no folders to merge")
	}
	var base *Manifest
	var baseFile string
	for _, d := range dirs {
		ms, paths, err := FindManifests(d)
		if err != nil {
			return nil, err
		}
		for i, m := range ms {
			if base == nil {
				base, baseFile = m, paths[i]
				continue
			}
			if why := sameSweep(base, m); why != "" {
				return nil, fmt.Errorf("%s and %s are not shards of one sweep: %s", baseFile, paths[i], why)
			}
		}
	}
	if len(opt.Formats) == 0 {
		opt.Formats = []string{FormatParquet}
	}
	if err := os.MkdirAll(filepath.Join(out, "passes"), 0o755); err != nil {
		return nil, err
	}
	var missing []string
	for i, c := range base.Chunks {
		dst := passPath(out, c.T, c.Sample)
		src := ""
		for _, d := range dirs {
			p := passPath(d, c.T, c.Sample)
			if _, err := readPassRecord(p); err == nil {
				src = p
				break
			}
		}
		if src == "" {
			missing = append(missing, missingPass(c, i, base.Shard))
			continue
		}
		if err := copyFileAtomic(src, dst); err != nil {
			return nil, err
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%d of %d passes have no complete file in %s: %s", len(missing), len(base.Chunks),
			strings.Join(dirs, ", "), strings.Join(missing, ", "))
	}
	man := *base
	man.Tool = Tool()
	man.Created = time.Now().UTC().Format(time.RFC3339)
	man.Shard = Shard{0, 1}
	man.Error, man.Reused, man.Notes, man.Flags = "", nil, nil, nil
	man.MergedFrom = dirs
	man.Args, man.Options = opt.Args, opt.CLIOptions
	if opt.Agg != nil {
		man.Analysis = *opt.Agg
	}
	man.Conventions = conventions(man.Sweep, man.Analysis)
	t0 := time.Now()
	if _, err := finalize(out, &man, opt.Formats); err != nil {
		return nil, err
	}
	man.Timings = Timings{Tables: time.Since(t0).Seconds()}
	for _, p := range man.Passes {
		man.Timings.Passes += p.Seconds
	}
	man.Timings.Total = time.Since(start).Seconds()
	man.Complete = true
	return &man, writeJSON(filepath.Join(out, "manifest.json"), &man)
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
	finish func(dir string) (StreamManifest, func() error)
}

// streamMeasures are the measurements whose folders MergeStream combines.
var streamMeasures = []streamMeasure{
	{"gdn", gdnTables, func(dir string) (StreamManifest, func() error) {
		m := &GDNManifest{}
		return m, func() error { _, err := finishGDN(dir, m); return err }
	}},
	{"sinks", sinksTables, func(dir string) (StreamManifest, func() error) {
		m := &SinksManifest{}
		return m, func() error { _, _, err := finishSinks(dir, m); return err }
	}},
	{"massive", massiveTables, func(dir string) (StreamManifest, func() error) {
		m := &MassiveManifest{}
		return m, func() error { _, _, err := finishMassive(dir, m); return err }
	}},
	{"experts", expertsTables, func(dir string) (StreamManifest, func() error) {
		m := &ExpertsManifest{}
		return m, func() error { _, _, err := finishExperts(dir, m); return err }
	}},
	{"retrieval", retrievalTables, func(dir string) (StreamManifest, func() error) {
		m := &RetrievalManifest{}
		return m, func() error { _, err := finishRetrieval(dir, m); return err }
	}},
	{"ppl", pplTables, func(dir string) (StreamManifest, func() error) {
		m := &PPLManifest{}
		return m, func() error { _, err := finishPPL(dir, m); return err }
	}},
}

// StreamKindOf returns the measurement whose manifests dir holds (""
// when none).
func StreamKindOf(dir string) string {
	for _, k := range streamMeasures {
		if m, _ := filepath.Glob(filepath.Join(dir, k.kind+"_manifest*.json")); len(m) > 0 {
			return k.kind
		}
	}
	return ""
}

// MergeStream combines the pass files of the shard folders of one probe
// gdn, sinks, massive, experts, retrieval or ppl run (--shard i/n with the same model, text and
// options) into out, as Merge does for a sweep: the pass files are copied
// into out/passes, every pass must be there, and the tables and manifest
// are those an unsharded run writes (in opt.Formats, default the shards').
// It returns the merged manifest.
func MergeStream(dirs []string, out string, opt MergeOptions) (StreamManifest, error) {
	start := time.Now()
	if len(dirs) == 0 {
		return nil, fmt.Errorf("no folders to merge")
	}
	kind := StreamKindOf(dirs[0])
	if kind == "" {
		return nil, fmt.Errorf("%s: no gdn, sinks, massive, experts, retrieval or ppl manifest", dirs[0])
	}
	i := slices.IndexFunc(streamMeasures, func(m streamMeasure) bool { return m.kind == kind })
	man, finish := streamMeasures[i].finish(out)
	tables := streamMeasures[i].tables
	var base map[string]string
	var baseFile string
	for _, d := range dirs {
		paths, _ := filepath.Glob(filepath.Join(d, kind+"_manifest*.json"))
		paths = slices.DeleteFunc(paths, func(p string) bool { return strings.HasSuffix(p, ".failed.json") })
		if len(paths) == 0 {
			return nil, fmt.Errorf("%s: no %s_manifest*.json (not a probe %s folder)", d, kind, kind)
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
	rec.Passes = []StreamPass{}
	for i, c := range rec.Chunks {
		src := ""
		var pass StreamPass
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
	rec.Shard = Shard{0, 1}
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
func missingPass(c Chunk, i int, s Shard) string {
	if n := s.Count; n > 1 {
		return fmt.Sprintf("%s (shard %d/%d)", c.name(), i%n, n)
	}
	return c.name()
}
