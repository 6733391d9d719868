package main

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/filterlens/probe/analysis"
	"github.com/filterlens/probe/analysis/results"
	"github.com/filterlens/probe/checkpoint"
)

// relGenerate writes a random gated checkpoint with probe generate.
func relGenerate(t *testing.T, dir string, args ...string) {
	t.Helper()
	base := []string{"generate", "--arch", "gated", "--layers", "3", "--d-model", "32", "--heads", "4", "--kv-heads", "2",
		"--vocab", "64", "--max-pos", "1024", "--out", dir}
	if code, _, errs := probe(t, append(base, args...)...); code != 0 {
		t.Fatalf("generate: %s", errs)
	}
}

// relWriteJSON writes v as JSON to a new file in dir.
func relWriteJSON(t *testing.T, dir, name string, v any) string {
	t.Helper()
	path := filepath.Join(dir, name)
	data, _ := json.Marshal(v)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// relPoison rewrites dir/model.safetensors with value at flat index i of
// tensor name.
func relPoison(t *testing.T, dir, name string, i int, value float32) {
	t.Helper()
	path := filepath.Join(dir, "model.safetensors")
	c, err := checkpoint.OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ts []checkpoint.Tensor
	for _, n := range c.Names() {
		info, _ := c.Info(n)
		x, err := c.Float32(n)
		if err != nil {
			t.Fatal(err)
		}
		if n == name {
			x[i] = value
		}
		ts = append(ts, checkpoint.Tensor{Name: n, Shape: info.Shape, Data: x})
	}
	c.Close()
	if err := checkpoint.WriteSafetensors(path, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureRefusesForbiddenPickle: probe capture on a pytorch_model.bin
// whose data.pkl calls os.system exits non-zero with the global named,
// runs nothing and writes nothing.
func TestCaptureRefusesForbiddenPickle(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "model")
	relGenerate(t, dir)
	os.Remove(filepath.Join(dir, "model.safetensors"))
	canary := filepath.Join(tmp, "pwned")
	// BINUNICODE of the shell command that would create the canary
	cmd := "X" + string(binary.LittleEndian.AppendUint32(nil, uint32(len("touch "+canary)))) + "touch " + canary
	for _, c := range []struct{ global, pickle string }{
		{"os.system", "\x80\x02cos\nsystem\n" + cmd + "\x85R."},
		{"builtins.eval", "\x80\x02cbuiltins\neval\n" + cmd + "\x85R."},
		{"subprocess.call", "\x80\x04\x8c\x0asubprocess\x8c\x04call\x93" + cmd + "\x85R."},
	} {
		var zbuf bytes.Buffer
		zw := zip.NewWriter(&zbuf)
		for _, e := range []struct{ name, data string }{{"archive/data.pkl", c.pickle}, {"archive/version", "3\n"}} {
			w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
			w.Write([]byte(e.data))
		}
		zw.Close()
		bin := filepath.Join(dir, "pytorch_model.bin")
		os.WriteFile(bin, zbuf.Bytes(), 0o644)
		ids := relWriteJSON(t, tmp, "ids.json", [][]int{{1, 2, 3}})
		out := filepath.Join(tmp, "capture.safetensors")
		code, _, errs := probe(t, "capture", "--model", dir, "--ids", ids, "--hook", "logits", "--out", out)
		want := bin + `: data.pkl: forbidden pickle global "` + c.global + `"`
		if code == 0 || !strings.Contains(errs, want) {
			t.Errorf("%s: exit %d, stderr %q; want one containing %q", c.global, code, errs, want)
		}
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%s: capture wrote %s", c.global, out)
		}
		if _, err := os.Stat(canary); err == nil {
			t.Fatalf("%s: the pickle's command ran", c.global)
		}
	}
}

// TestIDFileErrorsNameTheFile: --ids files that are not a rectangular
// batch of non-negative ids are refused with the file, sequence and
// position named, before the model is loaded.
func TestIDFileErrorsNameTheFile(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "model")
	relGenerate(t, dir)
	for _, c := range []struct {
		ids  any
		want string
	}{
		{[][]int{{1, 2}, {3}}, "sequence 1 has 1 tokens, sequence 0 has 2 (the batch must be rectangular)"},
		{[][]int{{1, 2}, {3, -4}}, "token id -4 at sequence 1 position 1 is negative"},
		{[][]int{{}}, "sequence 0 is empty"},
		{[]string{"a"}, "want " + idFormat},
	} {
		ids := relWriteJSON(t, tmp, "ids.json", c.ids)
		for _, cmd := range [][]string{
			{"capture", "--model", dir, "--ids", ids, "--hook", "logits", "--out", filepath.Join(tmp, "o.safetensors")},
			{"diag", "--model", dir, "--ids", ids, "--out", filepath.Join(tmp, "o.csv")},
		} {
			code, _, errs := probe(t, cmd...)
			if code != 1 || !strings.Contains(errs, ids+": "+c.want) {
				t.Errorf("%s %v: exit %d, stderr %q; want %q", cmd[0], c.ids, code, errs, c.want)
			}
		}
	}
	stream := relWriteJSON(t, tmp, "stream.json", []int{4, 5, -6, 7})
	code, _, errs := probe(t, "sweep", "--model", dir, "--ids", stream, "--lengths", "8", "--out", filepath.Join(tmp, "sw"))
	if code != 1 || !strings.Contains(errs, stream+": token id -6 at position 2 is negative") {
		t.Errorf("sweep with a negative id: exit %d, stderr %q", code, errs)
	}
}

// TestNonFiniteWeightReported: a NaN written into one key row of layer 1
// (KV head 1, read by query heads 2 and 3) makes capture, diag and sweep
// name layer 1, head 2, position 0 and exit 1; diag and sweep under
// --on-nonfinite flag go on and say so (the sweep in its manifest).
func TestNonFiniteWeightReported(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "model")
	relGenerate(t, dir)
	dh := 32 / 4
	relPoison(t, dir, "model.layers.1.self_attn.k_proj.weight", (1*dh+2)*32+5, float32(math.NaN()))
	rng := rand.New(rand.NewPCG(3, 4))
	seq := make([]int, 400)
	for i := range seq {
		seq[i] = rng.IntN(64)
	}
	ids := relWriteJSON(t, tmp, "ids.json", [][]int{seq[:24]})
	stream := relWriteJSON(t, tmp, "stream.json", seq)

	out := filepath.Join(tmp, "capture.safetensors")
	code, _, errs := probe(t, "capture", "--model", dir, "--ids", ids, "--hook", "blocks.*.hook_resid_post", "--out", out)
	if want := "non-finite value NaN in the attention output of layer 1, head 2, at batch 0 position 0"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("capture: exit %d, stderr %q; want %q", code, errs, want)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("capture wrote its output despite the fault")
	}

	csv := filepath.Join(tmp, "diag.csv")
	code, _, errs = probe(t, "diag", "--model", dir, "--ids", ids, "--out", csv)
	if want := "non-finite attention weights in attention row: layer 1, head 2, query 0"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("diag: exit %d, stderr %q; want %q", code, errs, want)
	}
	code, stdout, errs := probe(t, "diag", "--model", dir, "--ids", ids, "--out", csv, "--on-nonfinite", "flag")
	if want := "first probes: non-finite attention weights in attention row: layer 1, head 2, query 0"; code != 0 || !strings.Contains(stdout, want) ||
		!strings.Contains(stdout, "the forward pass stopped early (model: non-finite value NaN in the attention output of layer 1, head 2") {
		t.Errorf("diag --on-nonfinite flag: exit %d, stdout %q, stderr %q", code, stdout, errs)
	}

	sweep := []string{"sweep", "--model", dir, "--ids", stream, "--lengths", "32,64", "--samples", "2", "--bootstrap", "0",
		"--progress=false", "--out", filepath.Join(tmp, "sweep")}
	code, _, errs = probe(t, sweep...)
	if want := "T=32 sample 0: stream tokens [0,32): non-finite attention weights in layer 1, head 2, query 0"; code != 1 || !strings.Contains(errs, want) {
		t.Errorf("sweep: exit %d, stderr %q; want %q", code, errs, want)
	}
	man, err := analysis.ReadManifest(filepath.Join(tmp, "sweep", "manifest.json"))
	if err != nil || man.Complete || !strings.Contains(man.Error, "layer 1, head 2, query 0") {
		t.Errorf("manifest of the stopped sweep: %v %+v", err, man)
	}
	code, stdout, errs = probe(t, append(sweep, "--on-nonfinite", "flag")...)
	if code != 0 || !strings.Contains(stdout, "flagged: pass T=32 sample 0") {
		t.Fatalf("sweep --on-nonfinite flag: exit %d, stdout %q, stderr %q", code, stdout, errs)
	}
	man, err = analysis.ReadManifest(filepath.Join(tmp, "sweep", "manifest.json"))
	if err != nil || !man.Complete || len(man.Flags) != 4 || !strings.Contains(man.Flags[0], "first at layer 1, head 2, query 0") {
		t.Errorf("manifest of the flagged sweep: %v, flags %q", err, man.Flags)
	}
}

// TestCaptureAndDiagDeterministic: the same inputs and GOMAXPROCS give
// byte-identical capture and diag files. Another GOMAXPROCS may change the
// last bits (the projections' row split changes gonum's GEMM blocking; see
// docs/reliability.md): the capture must then agree to float32 rounding.
func TestCaptureAndDiagDeterministic(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "model")
	relGenerate(t, dir, "--d-model", "128", "--heads", "4", "--kv-heads", "2", "--vocab", "512")
	rng := rand.New(rand.NewPCG(5, 6))
	batch := make([][]int, 2)
	for b := range batch {
		batch[b] = make([]int, 320)
		for i := range batch[b] {
			batch[b][i] = rng.IntN(512)
		}
	}
	ids := relWriteJSON(t, tmp, "ids.json", batch)
	run := func(procs int, name string) (capture string, diag []byte) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		capture = filepath.Join(tmp, name+".safetensors")
		if code, _, errs := probe(t, "capture", "--model", dir, "--ids", ids, "--hook", "blocks.*.attn.hook_pattern",
			"--hook", "blocks.*.hook_resid_post", "--hook", "logits", "--out", capture); code != 0 {
			t.Fatalf("capture: %s", errs)
		}
		d := filepath.Join(tmp, name+".csv")
		if code, _, errs := probe(t, "diag", "--model", dir, "--ids", ids, "--out", d); code != 0 {
			t.Fatalf("diag: %s", errs)
		}
		diag, _ = os.ReadFile(d)
		return capture, diag
	}
	read := func(path string) []byte { b, _ := os.ReadFile(path); return b }
	c1, d1 := run(4, "a")
	c2, d2 := run(4, "b")
	if !bytes.Equal(read(c1), read(c2)) || !bytes.Equal(d1, d2) {
		t.Fatalf("two runs with the same inputs and GOMAXPROCS differ: capture %v, diag %v", bytes.Equal(read(c1), read(c2)), bytes.Equal(d1, d2))
	}
	c3, d3 := run(1, "c")
	a, err := checkpoint.OpenFile(c1)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := checkpoint.OpenFile(c3)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	worst := 0.0
	for _, name := range a.Names() {
		x, _ := a.Float64(name)
		y, err := b.Float64(name)
		if err != nil || len(x) != len(y) {
			t.Fatalf("%s: %v", name, err)
		}
		scale := 0.0
		for _, v := range x {
			scale = max(scale, math.Abs(v))
		}
		for i := range x {
			worst = max(worst, math.Abs(x[i]-y[i])/max(scale, 1e-30))
		}
	}
	if worst > 1e-5 {
		t.Errorf("GOMAXPROCS 4 and 1: captures differ by %g of a tensor's largest value, more than rounding", worst)
	}
	t.Logf("GOMAXPROCS 4 vs 1: capture identical %v (largest difference %.1e of a tensor's scale), diag CSV identical %v",
		bytes.Equal(read(c1), read(c3)), worst, bytes.Equal(d1, d3))
}

// relGoTool finds the go command that runs these tests.
func relGoTool(t *testing.T) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); runtime.GOROOT() != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the probe binary")
	}
	return p
}

// relPass is one pass file's key hash and rows (its footer's timings
// differ from run to run; the rows must not).
type relPass struct {
	hash string
	rows []analysis.BucketRow
}

// relPassRows reads every pass file of a sweep folder, failing the test if
// one in place is not complete.
func relPassRows(t *testing.T, dir string) map[string]relPass {
	t.Helper()
	out := map[string]relPass{}
	ents, _ := os.ReadDir(filepath.Join(dir, "passes"))
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			continue
		}
		path := filepath.Join(dir, "passes", e.Name())
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, _ := f.Stat()
		pf, err := parquet.OpenFile(f, st.Size())
		var rec struct {
			Hash string           `json:"hash"`
			Rows map[string]int64 `json:"rows"`
		}
		if err == nil {
			meta, _ := pf.Lookup("probe.pass")
			err = json.Unmarshal([]byte(meta), &rec)
		}
		if err != nil {
			t.Fatalf("a pass file that is not complete is in place: %s: %v", path, err)
		}
		if !strings.HasSuffix(e.Name(), ".buckets.parquet") { // the pass's nonfinite table
			out[e.Name()] = relPass{rec.Hash, nil}
			continue
		}
		rows, err := results.ReadTable[analysis.BucketRow](path)
		if err != nil || int64(len(rows)) != rec.Rows["buckets"] {
			t.Fatalf("a pass file that is not complete is in place: %s: %v (%d rows, the record says %d)", path, err, len(rows), rec.Rows["buckets"])
		}
		out[e.Name()] = relPass{rec.Hash, rows}
	}
	return out
}

// relRowsDiffer counts the rows of a and b whose statistics differ by more
// than rel (relative; 0: bit for bit); ok is false when the rows do not
// even describe the same cells and counts.
func relRowsDiffer(a, b []analysis.BucketRow, rel float64) (n int, ok bool) {
	if len(a) != len(b) {
		return len(a), false
	}
	near := func(x, y float64) bool {
		if rel == 0 {
			return math.Float64bits(x) == math.Float64bits(y)
		}
		return math.Abs(x-y) <= rel*max(math.Abs(x), math.Abs(y))+1e-12
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.T != y.T || x.Sample != y.Sample || x.Layer != y.Layer || x.Head != y.Head || x.QLo != y.QLo ||
			x.QHi != y.QHi || x.Metric != y.Metric || x.N != y.N || x.NonFinite != y.NonFinite {
			return i, false
		}
		if !near(x.Sum, y.Sum) || !near(x.M2, y.M2) {
			n++
		}
	}
	return n, true
}

// relTables reads the table files of a sweep folder (not the manifests,
// which hold timings, nor temporary files).
func relTables(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := tableFiles(t, dir)
	for name := range out {
		if strings.Contains(name, ".tmp-") {
			delete(out, name)
		}
	}
	return out
}

// relTemps lists the temporary files under dir and dir/passes.
func relTemps(dir string) []string {
	var tmps []string
	for _, d := range []string{dir, filepath.Join(dir, "passes")} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp-") {
				tmps = append(tmps, filepath.Join(d, e.Name()))
			}
		}
	}
	return tmps
}

// TestSweepSurvivesSIGKILL builds the probe binary, runs a 12-pass sweep
// uninterrupted, then runs it again into another folder killing it with
// SIGKILL at seeded random moments and precisely while a pass file or a
// table is being written (polling for the writer's temporary file),
// resuming each time. After every kill each pass file in place must be
// complete and equal to the uninterrupted run's, and each table present
// equal to its final bytes; the finished folder's tables must equal the
// uninterrupted run's byte for byte. Then a truncated, a corrupted and an
// emptied pass file are run again on resume, and a pass file of another
// pass is refused with a message naming it. It also compares GOMAXPROCS 2
// with GOMAXPROCS 1 (--threads 1).
func TestSweepSurvivesSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs sweeps")
	}
	start := time.Now()
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "probe")
	build := exec.Command(relGoTool(t), "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	dir := filepath.Join(tmp, "model")
	relGenerate(t, dir, "--layers", "4", "--d-model", "64", "--vocab", "256", "--max-pos", "2048")
	rng := rand.New(rand.NewPCG(11, 12))
	stream := make([]int, 6200)
	for i := range stream {
		stream[i] = rng.IntN(256)
	}
	ids := relWriteJSON(t, tmp, "stream.json", stream)
	args := func(out string, threads int) []string {
		return []string{"sweep", "--model", dir, "--ids", ids, "--lengths", "256,512", "--samples", "6", "--bootstrap", "200",
			"--format", "parquet,csv", "--threads", fmt.Sprint(threads), "--progress=false", "--out", out}
	}
	sweep := func(out string, procs, threads int) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(bin, args(out, threads)...)
		cmd.Env = append(os.Environ(), fmt.Sprintf("GOMAXPROCS=%d", procs))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		return cmd, &stderr
	}
	runOK := func(out string, procs, threads int) {
		t.Helper()
		cmd, stderr := sweep(out, procs, threads)
		if err := cmd.Run(); err != nil {
			t.Fatalf("sweep into %s: %v\n%s", out, err, stderr)
		}
	}

	ref := filepath.Join(tmp, "ref")
	t0 := time.Now()
	runOK(ref, 2, 2)
	whole := time.Since(t0)
	refTables, refPasses := relTables(t, ref), relPassRows(t, ref)
	if len(refPasses) != 24 || len(refTables) != 11 {
		t.Fatalf("reference sweep: %d pass files, %d tables", len(refPasses), len(refTables))
	}

	// Determinism: the same run again, and with one attention worker, is
	// identical; with GOMAXPROCS 1 the projections' row split changes
	// gonum's GEMM blocking, and so the last bits (docs/reliability.md).
	for _, c := range []struct {
		name           string
		procs, threads int
		rel            float64
	}{{"again", 2, 2, 0}, {"one-attention-worker", 2, 1, 0}, {"gomaxprocs-1", 1, 1, 1e-5}} {
		out := filepath.Join(tmp, c.name)
		runOK(out, c.procs, c.threads)
		tables, passes := relTables(t, out), relPassRows(t, out)
		var tdiff []string
		for name, b := range refTables {
			if !bytes.Equal(tables[name], b) {
				tdiff = append(tdiff, name)
			}
		}
		rows, differ := 0, 0
		for name, p := range refPasses {
			n, ok := relRowsDiffer(p.rows, passes[name].rows, c.rel)
			if !ok || passes[name].hash != p.hash {
				t.Fatalf("sweep %s: %s does not describe the same cells as the reference", c.name, name)
			}
			bits, _ := relRowsDiffer(p.rows, passes[name].rows, 0)
			rows, differ = rows+len(p.rows), differ+bits
			if n > 0 {
				t.Errorf("sweep %s (GOMAXPROCS %d, --threads %d): %d rows of %s differ by more than %g from GOMAXPROCS 2, --threads 2",
					c.name, c.procs, c.threads, n, name, c.rel)
			}
		}
		if c.rel == 0 && len(tdiff) > 0 {
			t.Errorf("sweep %s (GOMAXPROCS %d, --threads %d): tables %v differ", c.name, c.procs, c.threads, tdiff)
		}
		t.Logf("sweep %s (GOMAXPROCS %d, --threads %d) vs GOMAXPROCS 2, --threads 2: %d of %d bucket rows differ in their bits, tables differing: %v",
			c.name, c.procs, c.threads, differ, rows, tdiff)
	}

	// Interrupted: SIGKILL at random moments and while files are written.
	out := filepath.Join(tmp, "killed")
	modes := []string{"delay", "pass-write", "delay", "pass-write", "delay", "pass-write", "table-write", "table-write"}
	kills, writes := 0, 0
	finished := false
	for _, mode := range modes {
		before := map[string]bool{}
		for _, p := range relTemps(out) {
			before[p] = true
		}
		cmd, stderr := sweep(out, 2, 2)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var err error
		exited := false
		switch mode {
		case "delay":
			d := time.Duration(rng.Int64N(int64(whole / 2)))
			select {
			case err = <-done:
				exited = true
			case <-time.After(d):
			}
		default: // poll for the temporary file of a pass (after skipping 0–2) or of a table
			where, skip := out, 0
			if mode == "pass-write" {
				where, skip = filepath.Join(out, "passes"), rng.IntN(3)
			}
			seen := map[string]bool{}
		poll:
			for {
				select {
				case err = <-done:
					exited = true
					break poll
				default:
				}
				ents, _ := os.ReadDir(where)
				for _, e := range ents {
					p := filepath.Join(where, e.Name())
					if strings.Contains(e.Name(), ".tmp-") && !before[p] && !seen[p] {
						seen[p] = true
					}
				}
				if len(seen) > skip {
					writes++
					break poll
				}
				time.Sleep(100 * time.Microsecond)
			}
		}
		if !exited {
			cmd.Process.Kill() // SIGKILL
			err = <-done
			kills++
		}
		if exited && err != nil {
			t.Fatalf("resumed sweep failed: %v\n%s", err, stderr)
		}
		// Whatever is in place is whole and right.
		for name, p := range relPassRows(t, out) {
			if n, ok := relRowsDiffer(p.rows, refPasses[name].rows, 0); n > 0 || !ok || p.hash != refPasses[name].hash {
				t.Fatalf("after a kill (%s), %s differs from the uninterrupted run's", mode, name)
			}
		}
		for name, b := range relTables(t, out) {
			if !bytes.Equal(b, refTables[name]) {
				t.Fatalf("after a kill (%s), table %s is in place but differs from the uninterrupted run's", mode, name)
			}
		}
		if exited {
			finished = true
			break
		}
	}
	if !finished {
		runOK(out, 2, 2)
	}
	leftovers := relTemps(out)
	t.Logf("killed %d times (%d while a file was being written); %d temporary files left behind: %v", kills, writes, len(leftovers), leftovers)
	if kills < 4 || writes < 2 {
		t.Errorf("only %d kills, %d of them during a write: the sweep is too fast for this test", kills, writes)
	}
	check := func(what string) {
		t.Helper()
		tables, passes := relTables(t, out), relPassRows(t, out)
		for name, b := range refTables {
			if !bytes.Equal(tables[name], b) {
				t.Errorf("%s: table %s differs from the uninterrupted run's", what, name)
			}
		}
		if len(passes) != len(refPasses) {
			t.Errorf("%s: %d pass files, want %d", what, len(passes), len(refPasses))
		}
		for name, p := range refPasses {
			if n, ok := relRowsDiffer(p.rows, passes[name].rows, 0); n > 0 || !ok || p.hash != passes[name].hash {
				t.Errorf("%s: passes/%s differs from the uninterrupted run's", what, name)
			}
		}
		man, err := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
		if err != nil || !man.Complete || len(man.Passes) != 12 {
			t.Errorf("%s: manifest %v", what, err)
		}
	}
	check("after the kills")

	// Damaged pass files are never taken as complete.
	passes := filepath.Join(out, "passes")
	damage := map[string]func([]byte) []byte{
		"T256-s1.buckets.parquet": func(b []byte) []byte { return b[:len(b)/2] },                                                // truncated
		"T512-s0.buckets.parquet": func(b []byte) []byte { b[len(b)/3] ^= 0xff; return b },                                      // a data page corrupted
		"T512-s3.buckets.parquet": func(b []byte) []byte { return nil },                                                         // emptied
		"T256-s4.buckets.parquet": func(b []byte) []byte { i := bytes.LastIndex(b, []byte(`"hash":"`)); b[i+9] ^= 1; return b }, // the record in the footer corrupted
		"T512-s5.buckets.parquet": func(b []byte) []byte { return append(b[:len(b)-8], "PAR1PAR1"...) },                         // the footer length lies
	}
	for name, f := range damage {
		b, _ := os.ReadFile(filepath.Join(passes, name))
		os.WriteFile(filepath.Join(passes, name), f(b), 0o644)
	}
	cmd, stderr := sweep(out, 2, 2)
	if err := cmd.Run(); err != nil {
		t.Fatalf("resume over damaged pass files: %v\n%s", err, stderr)
	}
	man, _ := analysis.ReadManifest(filepath.Join(out, "manifest.json"))
	if man == nil || len(man.Reused) != 12-len(damage) {
		t.Errorf("resume over %d damaged pass files reused %v", len(damage), man)
	} else {
		for name := range damage {
			if !slices.ContainsFunc(man.Notes, func(n string) bool { return strings.Contains(n, name+" was incomplete") }) {
				t.Errorf("no note on %s being run again: %q", name, man.Notes)
			}
		}
	}
	check("after the damaged pass files were run again")

	// A whole pass file of another pass is refused, by name, and kept.
	b, _ := os.ReadFile(filepath.Join(passes, "T256-s0.buckets.parquet"))
	os.WriteFile(filepath.Join(passes, "T256-s2.buckets.parquet"), b, 0o644)
	cmd, stderr = sweep(out, 2, 2)
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 ||
		!strings.Contains(stderr.String(), filepath.Join(passes, "T256-s2.buckets.parquet")+" was made from another model, text or options") {
		t.Errorf("a pass file of another pass: %v, %s", err, stderr)
	}
	if kept, _ := os.ReadFile(filepath.Join(passes, "T256-s2.buckets.parquet")); !bytes.Equal(kept, b) {
		t.Error("the refused pass file was changed")
	}
	t.Logf("took %v (one uninterrupted sweep: %v)", time.Since(start).Round(time.Millisecond), whole.Round(time.Millisecond))
}
