package analysis

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/model"
)

// streamKindRuns returns, per stream command, a function that runs it on a
// small Qwen3.5 hybrid (Gated DeltaNet and gated softmax layers) over 2
// lengths × 2 samples into out; other changes an option that decides the
// passes.
func streamKindRuns(t *testing.T) map[string]func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
	dir := genModel(t, model.ArchQwen35, 4, 64, 2, 1, 128, 512, nil)
	moeDir := genModel(t, model.ArchMixtral, 2, 32, 4, 2, 128, 512, nil)
	stream := randomStream(400, 0, 128, 5)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	fm := []string{FormatParquet, FormatCSV}
	return map[string]func(string, results.Shard, bool, bool) (StreamManifest, error){
		"gdn": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: []int{24, 40}, Samples: 2}, WRows: true}
			if other {
				o.Innovation = "undecayed"
			}
			man, _, err := (&GDNRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force}, Options: o}).Run()
			return man, err
		},
		"sinks": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := DefaultSinksOptions()
			o.Lengths, o.Samples = []int{24, 40}, 2
			if other {
				o.GateBelow = 0.2
			}
			man, _, _, err := (&SinksRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force}, Options: o}).Run()
			return man, err
		},
		"massive": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := DefaultMassiveOptions()
			o.Lengths, o.Samples, o.TopK = []int{24, 40}, 2, 4
			if other {
				o.TopK = 5
			}
			man, _, _, err := (&MassiveRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force}, Options: o}).Run()
			return man, err
		},
		"experts": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := DefaultExpertsRunOptions()
			o.Lengths, o.Samples = []int{24, 40}, 2
			if other {
				o.Margin = results.MarginLogit
			}
			man, _, _, err := (&ExpertsRun{RunSpec: RunSpec{Dir: moeDir, Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force}, Options: o}).Run()
			return man, err
		},
		// four samples of one copy task of T = 24 (no token stream)
		"retrieval": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := DefaultRetrievalOptions()
			o.Segment, o.Gap, o.Samples, o.Steps = 8, 8, 4, StepsAll
			if other {
				o.Seed = 2
			}
			man, _, err := (&RetrievalRun{RunSpec: RunSpec{Dir: dir, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force}, Options: o}).Run()
			return man, err
		},
		// the learned gate and gate 1 on two chunks of T = 24
		"ppl": func(out string, sh results.Shard, force, other bool) (StreamManifest, error) {
			o := DefaultPPLOptions()
			o.Lengths, o.Samples, o.Variants = []int{24}, 2, []string{results.VariantLearned, results.VariantOne}
			if other {
				o.Positions = "last-quarter"
			}
			res, err := (&PPLRun{RunSpec: RunSpec{Source: src, Stream: stream, Out: out, Formats: fm, Threads: 2, Shard: sh, Force: force},
				Dirs: []string{dir}, Options: o}).Run()
			if res == nil {
				return nil, err
			}
			return res.Manifest, err
		},
	}
}

// streamKill says, per stream command, which pass a kill leaves without
// files and which pass file it cuts short in TestStreamShardsMergeAndResume.
var streamKill = map[string]struct {
	tables   []string
	missing  results.Chunk
	cut      results.Chunk
	cutTable string
}{
	"gdn":       {gdnTables, results.Chunk{T: 40}, results.Chunk{T: 24, Sample: 1}, "gdn"},
	"sinks":     {sinksTables, results.Chunk{T: 40}, results.Chunk{T: 24, Sample: 1}, "sinks_heads"},
	"massive":   {massiveTables, results.Chunk{T: 40}, results.Chunk{T: 24, Sample: 1}, "massive_ppl"},
	"experts":   {expertsTables, results.Chunk{T: 40}, results.Chunk{T: 24, Sample: 1}, "experts_sums"},
	"retrieval": {retrievalTables, results.Chunk{T: 24, Sample: 2}, results.Chunk{T: 24, Sample: 1}, "retrieval_steps"},
	"ppl":       {pplTables, results.Chunk{T: 24, Pass: "m0/one"}, results.Chunk{T: 24, Sample: 1, Pass: "m0/learned"}, "ppl"},
}

// tableFiles returns the tables (Parquet, CSV) of a run's folder by name.
func tableFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, ext := range []string{"*.parquet", "*.csv"} {
		paths, _ := filepath.Glob(filepath.Join(dir, ext))
		for _, p := range paths {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			out[filepath.Base(p)] = b
		}
	}
	return out
}

func sameFiles(t *testing.T, what string, want, got map[string][]byte) {
	t.Helper()
	if len(want) < 2 || len(got) != len(want) {
		t.Fatalf("%s: %d table files, want %d (at least 2)", what, len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s: %s differs from the unsharded run's", what, name)
		}
	}
}

// TestStreamShardsMergeAndResume: for gdn, sinks, massive, experts,
// retrieval and ppl, two shards
// merged give tables byte-identical to the unsharded run's, with a merged
// manifest; a run killed after some passes (one pass missing, one pass file
// cut short, the tables not yet written) resumes with the finished passes
// kept and gives the same bytes; a folder of another plan is refused, and
// with --force its pass files are an error, never overwritten.
func TestStreamShardsMergeAndResume(t *testing.T) {
	for kind, run := range streamKindRuns(t) {
		t.Run(kind, func(t *testing.T) {
			tmp := t.TempDir()
			whole := filepath.Join(tmp, "whole")
			man, err := run(whole, results.Shard{}, false, false)
			if err != nil {
				t.Fatal(err)
			}
			rec := man.Record()
			if !rec.Complete || rec.Kind != kind || len(rec.Passes) != 4 || rec.Shard != (results.Shard{Index: 0, Count: 1}) {
				t.Fatalf("unsharded manifest: complete %v kind %q passes %d shard %v", rec.Complete, rec.Kind, len(rec.Passes), rec.Shard)
			}
			want := tableFiles(t, whole)

			s0, s1 := filepath.Join(tmp, "s0"), filepath.Join(tmp, "s1")
			for i, d := range []string{s0, s1} {
				man, err := run(d, results.Shard{Index: i, Count: 2}, false, false)
				if err != nil {
					t.Fatal(err)
				}
				rec := man.Record()
				if len(rec.Passes) != 2 || len(rec.Tables) != 0 || !rec.Complete {
					t.Errorf("shard %d/2: %d passes, tables %v, complete %v; want 2 passes and no tables", i, len(rec.Passes), rec.Tables, rec.Complete)
				}
				if _, err := os.Stat(filepath.Join(d, StreamManifestName(kind, results.Shard{Index: i, Count: 2}))); err != nil {
					t.Error(err)
				}
			}
			merged := filepath.Join(tmp, "merged")
			mm, err := MergeStream([]string{s0, s1}, merged, MergeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameFiles(t, "merged shards", want, tableFiles(t, merged))
			var back map[string]any
			b, _ := os.ReadFile(filepath.Join(merged, kind+"_manifest.json"))
			if err := json.Unmarshal(b, &back); err != nil || back["complete"] != true || back["merged_from"] == nil ||
				len(mm.Record().Passes) != 4 || !slices.Equal(mm.Record().Formats, rec.Formats) {
				t.Errorf("merged manifest: %v, %v", err, string(b))
			}
			// one shard alone is not the run
			if _, err := MergeStream([]string{s0}, filepath.Join(tmp, "half"), MergeOptions{}); err == nil || !strings.Contains(err.Error(), "(shard 1/2)") {
				t.Errorf("merging one of two shards: %v", err)
			}

			// A kill after some passes: one chunk has no files (gdn …
			// experts: (40, 0)), one file of another ((24, 1)) is cut short,
			// no tables, the manifest unfinished.
			k := streamKill[kind]
			for _, tb := range k.tables {
				os.Remove(streamPassPath(whole, tb, k.missing))
			}
			cut := streamPassPath(whole, k.cutTable, k.cut)
			full, _ := os.ReadFile(cut)
			os.WriteFile(cut, full[:len(full)/2], 0o644)
			if _, err := readStreamPass(cut, filepath.Ext(strings.TrimSuffix(cut, ".parquet"))[1:]); !errors.Is(err, errIncomplete) {
				t.Errorf("cut pass file: %v, want errIncomplete", err)
			}
			for name := range want {
				os.Remove(filepath.Join(whole, name))
			}
			mp := filepath.Join(whole, kind+"_manifest.json")
			b, _ = os.ReadFile(mp)
			os.WriteFile(mp, bytes.Replace(b, []byte(`"complete": true`), []byte(`"complete": false`), 1), 0o644)
			man, err = run(whole, results.Shard{}, false, false)
			if err != nil {
				t.Fatal(err)
			}
			rec = man.Record()
			if len(rec.Reused) != 2 || !strings.Contains(strings.Join(rec.Notes, "\n"), "was incomplete") || !rec.Complete {
				t.Errorf("resumed run: reused %v, notes %q, complete %v; want 2 reused and a note on the cut file", rec.Reused, rec.Notes, rec.Complete)
			}
			sameFiles(t, "resumed run", want, tableFiles(t, whole))

			// Another plan: refused; with force, the pass files made with
			// the other options are an error and stay as they were.
			passes, _ := filepath.Glob(filepath.Join(whole, "passes", "*"))
			before := map[string][]byte{}
			for _, p := range passes {
				before[p], _ = os.ReadFile(p)
			}
			if _, err := run(whole, results.Shard{}, false, true); err == nil || !strings.Contains(err.Error(), "with another plan") {
				t.Errorf("another plan into the folder: %v", err)
			}
			if _, err := run(whole, results.Shard{}, true, true); err == nil || !strings.Contains(err.Error(), "was made from another model, text or options") {
				t.Errorf("another plan with force: %v", err)
			}
			for p, b := range before {
				if now, _ := os.ReadFile(p); !bytes.Equal(now, b) {
					t.Errorf("%s changed", p)
				}
			}
			sameFiles(t, "after the refused runs", want, tableFiles(t, whole))
			if _, err := os.Stat(filepath.Join(whole, kind+"_manifest.failed.json")); err != nil {
				t.Errorf("the failed forced run left no record beside the finished manifest: %v", err)
			}
		})
	}
}

// TestSinksForceReaggregates: the sink rate's thresholds only shape the
// tables, so a run with other ε into the folder is refused, and with force
// it keeps every finished pass and rewrites sinks_rate.
func TestSinksForceReaggregates(t *testing.T) {
	dir := genModel(t, model.ArchQwen35, 4, 64, 2, 1, 128, 512, nil)
	stream := randomStream(200, 0, 128, 6)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	out := t.TempDir()
	run := func(eps []float64, force bool) (*results.SinksManifest, []results.SinkRateRow, error) {
		o := DefaultSinksOptions()
		o.Lengths, o.Samples, o.Eps = []int{24, 40}, 2, eps
		man, _, rates, err := (&SinksRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Threads: 2, Force: force}, Options: o}).Run()
		return man, rates, err
	}
	if _, _, err := run([]float64{0.3}, false); err != nil {
		t.Fatal(err)
	}
	if _, _, err := run([]float64{0.1, 0.3}, false); err == nil || !strings.Contains(err.Error(), "sinks.eps") {
		t.Errorf("other ε without force: %v", err)
	}
	man, rates, err := run([]float64{0.1, 0.3}, true)
	if err != nil {
		t.Fatal(err)
	}
	if len(man.Reused) != 4 || len(rates) != 2*2 {
		t.Errorf("forced re-aggregation: reused %v, %d rate rows (want 4 passes kept and 2 lengths × 2 ε)", man.Reused, len(rates))
	}
	back, err := results.ReadTable[results.SinkRateRow](filepath.Join(out, "sinks_rate.parquet"))
	if err != nil || len(back) != 4 {
		t.Errorf("sinks_rate.parquet: %d rows, %v", len(back), err)
	}
}

// TestStreamStop: a closed Stop stops a stream run before its next pass
// with ErrStopped, the manifest unfinished and saying so; the same run
// without it then completes.
func TestStreamStop(t *testing.T) {
	dir := genModel(t, model.ArchQwen35, 4, 64, 2, 1, 128, 512, nil)
	stream := randomStream(200, 0, 128, 7)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	out := t.TempDir()
	stop := make(chan struct{})
	close(stop)
	run := &GDNRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Threads: 2, Stop: stop}, Options: results.GDNOptions{StreamPlan: results.StreamPlan{Lengths: []int{24, 40}, Samples: 2}}}
	man, _, err := run.Run()
	if !errors.Is(err, ErrStopped) || !strings.Contains(err.Error(), "probe gdn stopped before its last pass: 0 of 4 passes finished") {
		t.Fatalf("stopped run: %v", err)
	}
	var back map[string]any
	b, _ := os.ReadFile(filepath.Join(out, results.GDNManifestName))
	if json.Unmarshal(b, &back); back["complete"] != false || !strings.Contains(fmt.Sprint(back["error"]), "stopped") || man.Complete {
		t.Errorf("manifest of the stopped run: %s", b)
	}
	run.Stop = nil
	man, rows, err := run.Run()
	if err != nil || !man.Complete || len(man.Passes) != 4 || rows == 0 {
		t.Errorf("resumed run: %v, complete %v, %d passes, %d rows", err, man.Complete, len(man.Passes), rows)
	}
}

// TestStreamChecksMemoryFirst: a stream command (sinks) whose longest pass
// cannot fit (T = 4M tokens at d 1024: tens of GiB of activations) is
// refused before its first pass, by model.Model.CheckMemory, with the
// manifest recording why and no pass file written.
func TestStreamChecksMemoryFirst(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the available memory is read from /proc (Linux)")
	}
	dir := genModel(t, model.ArchQwen3, 1, 1024, 8, 8, 128, 512, nil)
	const long = 1 << 22
	stream := randomStream(long+64, 0, 128, 7)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	o := DefaultSinksOptions()
	o.Lengths, o.Samples, o.AllowExtrapolation = []int{64, long}, 1, true
	out := t.TempDir()
	man, _, _, err := (&SinksRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Threads: 2}, Options: o}).Run()
	if man == nil {
		t.Fatalf("no manifest; error %v", err)
	}
	refusedForMemory(t, err, fmt.Sprintf("the longest pass (T=%d)", long), man.Record().Error, len(man.Record().Passes), out)
}

// TestStreamProgress: a stream command reports each pass it runs layer by
// layer — every forward pass of it (massive: the plain pass and one per
// intervention) — and done, with its work growing to the whole run's; a
// second run into the same folder reports every pass as already finished.
func TestStreamProgress(t *testing.T) {
	const layers = 4
	dir := genModel(t, model.ArchQwen3, layers, 64, 2, 1, 128, 512, nil)
	stream := randomStream(400, 0, 128, 5)
	src := results.SourceInfo{Kind: "ids", File: results.FileHash{Path: "stream.json"}, Tokens: len(stream), Digest: TokenDigest(stream)}
	o := DefaultMassiveOptions()
	o.Lengths, o.Samples, o.TopK = []int{24, 40}, 2, 4
	out := t.TempDir()
	var got []Progress
	run := &MassiveRun{RunSpec: RunSpec{Dir: dir, Source: src, Stream: stream, Out: out, Threads: 2, Progress: func(p Progress) { got = append(got, p) }}, Options: o}
	if _, _, _, err := run.Run(); err != nil {
		t.Fatal(err)
	}
	steps := layers * (1 + len(o.Interventions)) // per pass
	if want := 4 * (1 + steps + 1); len(got) != want {
		t.Fatalf("%d reports, want %d (per pass: start, %d layers, done)", len(got), want, steps)
	}
	for i, p := range got {
		pass, k := i/(steps+2), i%(steps+2)
		if p.Pass != pass+1 || p.Passes != 4 || p.Layers != steps || p.Reused {
			t.Fatalf("report %d: %+v", i, p)
		}
		switch {
		case k == 0 && (p.Layer != 0 || p.Done), k > 0 && k <= steps && (p.Layer != k || p.Done), k == steps+1 && (!p.Done || p.Layer != steps):
			t.Fatalf("report %d (step %d of pass %d): layer %d, done %v", i, k, pass+1, p.Layer, p.Done)
		}
		if i > 0 && p.Work < got[i-1].Work {
			t.Fatalf("report %d: work %v fell from %v", i, p.Work, got[i-1].Work)
		}
	}
	last := got[len(got)-1]
	if total := got[0].Work + got[0].WorkLeft; math.Abs(last.Work-total) > 1e-9*total || math.Abs(last.WorkLeft) > 1e-9*total || last.Tokens != 24+24+40+40 {
		t.Errorf("last report %+v: want work %v, none left, 128 tokens", last, total)
	}

	got = nil
	if _, _, _, err := run.Run(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 4 || !got[3].Reused || !got[3].Done {
		t.Errorf("second run: reports %+v, want 4 passes already finished", got)
	}
}

// TestStreamRefusesFolderWithoutPasses: a retrieval or ppl folder written
// before these commands kept pass files (a manifest without "passes") is
// refused with how to convert it; with force the run goes ahead and
// replaces its tables.
func TestStreamRefusesFolderWithoutPasses(t *testing.T) {
	dir := genModel(t, model.ArchQwen3, 2, 32, 4, 2, 64, 128, nil)
	out := t.TempDir()
	old := `{"kind": "retrieval", "complete": true, "retrieval": {"segment": 8}, "samples": []}`
	if err := os.WriteFile(filepath.Join(out, results.RetrievalManifestName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	o := DefaultRetrievalOptions()
	o.Segment, o.Samples = 8, 2
	run := func(force bool) error {
		_, _, err := (&RetrievalRun{RunSpec: RunSpec{Dir: dir, Out: out, Threads: 2, Force: force}, Options: o}).Run()
		return err
	}
	if err := run(false); err == nil || !strings.Contains(err.Error(), "written before it kept pass files") || !strings.Contains(err.Error(), "--force") {
		t.Errorf("a folder of the previous code: %v", err)
	}
	if err := run(true); err != nil {
		t.Errorf("with force: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "retrieval_heads.parquet")); err != nil {
		t.Error(err)
	}
}
