package main

import (
	"bytes"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/filterlens/probe/analysis"
)

// interruptingWriter stands in for the progress output: when the first
// pass is reported done it sends SIGINT to this process and waits until
// the sweep has taken it (its notice is written), so that the sweep stops
// after exactly one pass.
type interruptingWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	sent bool
	seen chan struct{}
}

func (w *interruptingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.buf.Write(p)
	first := !w.sent && strings.Contains(string(p), " done ")
	if first {
		w.sent = true
	}
	if strings.Contains(string(p), "interrupted: finishing the pass under way") {
		close(w.seen)
	}
	w.mu.Unlock()
	if first {
		syscall.Kill(os.Getpid(), syscall.SIGINT)
		select {
		case <-w.seen:
		case <-time.After(10 * time.Second):
		}
	}
	return len(p), nil
}

// TestSweepSIGINTResumes: SIGINT during a sweep finishes the pass under
// way and stops with exit status 130, the finished pass kept, the
// manifest marked unfinished and the exact command to resume printed;
// summarize works on what is there and says so; the resume command
// completes the sweep to tables byte-identical to an uninterrupted run.
func TestSweepSIGINTResumes(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	// Keep SIGINT from ever reaching the default handler (which would end
	// the test binary) should it arrive outside the sweep's handling.
	guard := make(chan os.Signal, 4)
	signal.Notify(guard, os.Interrupt)
	defer signal.Stop(guard)

	tmp := t.TempDir()
	plan := []string{"--model", modelDir, "--ids", idsFile, "--lengths", "64,128", "--samples", "3", "--bootstrap", "50",
		"--format", "parquet,csv"}
	whole := filepath.Join(tmp, "whole")
	withProgress(t)
	if code, _, errs := probe(t, append([]string{"sweep", "--out", whole}, plan...)...); code != 0 {
		t.Fatal(errs)
	}

	cut := filepath.Join(tmp, "cut")
	args := append([]string{"sweep", "--out", cut}, plan...)
	iw := &interruptingWriter{seen: make(chan struct{})}
	old := progressOut
	progressOut = iw
	code, out, errs := probe(t, args...)
	progressOut = old
	resume := "resume with (finished passes are reused):\n  probe " + strings.Join(args, " ")
	if code != 130 || !strings.Contains(out, "interrupted: 1 of 6 passes are finished and kept in "+filepath.Join(cut, "passes")) ||
		!strings.Contains(out, resume) || !strings.Contains(errs, "sweep stopped before its last pass: 1 of 6 passes finished") {
		t.Fatalf("interrupted sweep: exit %d\nstdout %s\nstderr %s\nprogress %s", code, out, errs, iw.buf.String())
	}
	m, err := analysis.ReadManifest(filepath.Join(cut, "manifest.json"))
	if err != nil || m.Complete || len(m.Passes) != 1 || !strings.Contains(m.Error, "1 of 6 passes finished") {
		t.Fatalf("manifest after the interrupt: %v %+v", err, m)
	}
	if ents, _ := os.ReadDir(filepath.Join(cut, "passes")); len(ents) != 2 {
		t.Errorf("%d files in passes/ (want the one finished pass's buckets and nonfinite, no temporary files)", len(ents))
	}

	code, sum, errs := probe(t, "summarize", cut)
	if code != 0 || !strings.Contains(sum, "unfinished sweep (probe sweep stopped before its last pass: 1 of 6 passes finished): the numbers below use the 1 passes of T = [64] × 1 samples finished in "+cut+", of the 6 planned") ||
		!strings.Contains(sum, "Fig. 2") {
		t.Errorf("summarize of the unfinished folder: exit %d %s\n%s", code, errs, sum)
	}
	if code, _, errs := probe(t, "summarize", "--json", cut); code != 0 {
		t.Errorf("summarize --json of the unfinished folder: %s", errs)
	}
	html := filepath.Join(t.TempDir(), "partial.html")
	if code, out, errs := probe(t, "report", "--static", "--out", html, cut); code != 0 ||
		!strings.Contains(out, "unfinished sweep: the report uses the 1 passes of T = [64] × 1 samples") {
		t.Errorf("report of the unfinished folder: exit %d %s\n%s", code, errs, out)
	}

	// The printed command resumes it.
	line := strings.TrimPrefix(resume[strings.Index(resume, "probe "):], "probe ")
	code, out, errs = probe(t, strings.Fields(line)...)
	if code != 0 || !strings.Contains(out, "6 passes (5 run, 1 already finished)") {
		t.Fatalf("resume: exit %d %s\n%s", code, errs, out)
	}
	want, got := tableFiles(t, whole), tableFiles(t, cut)
	if len(want) == 0 || len(got) != len(want) {
		t.Fatalf("tables: %d after the resume, %d uninterrupted", len(got), len(want))
	}
	for name, b := range want {
		if !bytes.Equal(got[name], b) {
			t.Errorf("%s: the resumed sweep's table differs from the uninterrupted one", name)
		}
	}
	if m, err := analysis.ReadManifest(filepath.Join(cut, "manifest.json")); err != nil || !m.Complete || m.Error != "" {
		t.Errorf("manifest after the resume: %v %+v", err, m)
	}
}

// TestEngineSIGINTResumes: probe retrieval and probe ppl, stopped by
// SIGINT after their first pass, exit 130 with the finished pass kept and
// the command that resumes them printed; that command completes the run to
// tables byte-identical to an uninterrupted one.
func TestEngineSIGINTResumes(t *testing.T) {
	modelDir, idsFile := sweepFixture(t)
	guard := make(chan os.Signal, 4)
	signal.Notify(guard, os.Interrupt)
	defer signal.Stop(guard)
	for _, c := range []struct {
		kind   string
		args   []string
		passes int
	}{
		{"retrieval", []string{"--model", modelDir, "--segment", "8", "--gap", "4", "--samples", "3", "--steps", "all"}, 3},
		{"ppl", []string{"--model", modelDir, "--ids", idsFile, "--lengths", "32,64", "--samples", "2", "--gate", "learned,k-matched"}, 9}, // a calibration pass, 2 variants × 2 lengths × 2 samples
	} {
		t.Run(c.kind, func(t *testing.T) {
			tmp := t.TempDir()
			withProgress(t)
			whole := filepath.Join(tmp, "whole")
			if code, _, errs := probe(t, append([]string{c.kind, "--out", whole}, c.args...)...); code != 0 {
				t.Fatal(errs)
			}
			cut := filepath.Join(tmp, "cut")
			args := append([]string{c.kind, "--out", cut}, c.args...)
			iw := &interruptingWriter{seen: make(chan struct{})}
			old := progressOut
			progressOut = iw
			code, out, errs := probe(t, args...)
			progressOut = old
			resume := "resume with (finished passes are reused):\n  probe " + strings.Join(args, " ")
			if code != 130 || !strings.Contains(out, "interrupted: 1 passes are finished and kept in "+filepath.Join(cut, "passes")) ||
				!strings.Contains(out, resume) || !strings.Contains(errs, fmt.Sprintf("stopped before its last pass: 1 of %d passes finished", c.passes)) {
				t.Fatalf("interrupted %s: exit %d\nstdout %s\nstderr %s\nprogress %s", c.kind, code, out, errs, iw.buf.String())
			}
			line := strings.TrimPrefix(resume[strings.Index(resume, "probe "):], "probe ")
			code, out, errs = probe(t, strings.Fields(line)...)
			if code != 0 || !strings.Contains(out, fmt.Sprintf("%d passes (%d run, 1 already finished)", c.passes, c.passes-1)) {
				t.Fatalf("resume: exit %d %s\n%s", code, errs, out)
			}
			want, got := engineTables(t, whole), engineTables(t, cut)
			if len(want) < 2 || len(got) != len(want) {
				t.Fatalf("tables: %d after the resume, %d uninterrupted", len(got), len(want))
			}
			for name, b := range want {
				if !bytes.Equal(got[name], b) {
					t.Errorf("%s: the resumed run's table differs from the uninterrupted one", name)
				}
			}
		})
	}
}

// engineTables returns the Parquet and CSV tables of a run's folder.
func engineTables(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for name, b := range tableFiles(t, dir) {
		if strings.HasSuffix(name, ".parquet") || strings.HasSuffix(name, ".csv") {
			out[name] = b
		}
	}
	return out
}
