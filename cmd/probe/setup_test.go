package main

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/filterlens/probe/report"
)

// TestReportsAnywhere runs the commands that write reports outside the
// repository with no echarts anywhere ($PROBE_ECHARTS_JS pointing to
// nothing, an empty user cache): each writes a static SVG report and says
// so in exactly one line; after `probe setup --tgz` fills the cache, the
// same command writes interactive charts with no such line.
func TestReportsAnywhere(t *testing.T) {
	repoCopy, repoErr := report.LocateECharts()
	if repoErr == nil {
		repoCopy, _ = filepath.Abs(repoCopy)
	}
	afaToy, _ := filepath.Abs("../../zoo/checkpoints/afa_toy")
	chromium := browserOrSkip(t)
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("XDG_CACHE_HOME", filepath.Join(dir, "cache"))
	t.Setenv("HOME", filepath.Join(dir, "home"))
	t.Setenv(report.EChartsEnv, filepath.Join(dir, "nothing.js"))
	capFile := filepath.Join(dir, "cap.safetensors")
	writeCapture(t, capFile, 40)
	for _, c := range [][]string{
		{"figures", "--paper", "rt", "--out", "rt", "--dpi", "30"},
		{"figures", "--paper", "afa", "--model", afaToy, "--out", "afa", "--dpi", "30"},
		{"report", "attention", "--capture", capFile, "--layer", "1", "--out", "maps", "--dpi", "30"},
	} {
		code, stdout, stderr := probe(t, c...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", c, code, stderr)
		}
		if n := strings.Count(stdout, "static SVG"); n != 1 || !strings.Contains(stdout, "probe setup") {
			t.Errorf("%v: want one line about static SVG and probe setup, got:\n%s", c, stdout)
		}
		html := filepath.Join(dir, c[len(c)-3], "index.html")
		page, err := os.ReadFile(html)
		if err != nil || !strings.Contains(string(page), "(static SVG mode)") {
			t.Errorf("%v: not a static page (%v)", c, err)
		}
		checkPage(t, chromium, html, -1)
	}
	if code, _, stderr := probe(t, "setup", "--tgz", filepath.Join(dir, "none.tgz")); code == 0 || !strings.Contains(stderr, "none.tgz") {
		t.Errorf("setup from a missing tarball: exit %d, %s", code, stderr)
	}
	if repoErr != nil {
		t.Skipf("the rest needs the real echarts.min.js: %v", repoErr)
	}
	js, err := os.ReadFile(repoCopy)
	if err != nil {
		t.Fatal(err)
	}
	tgz := filepath.Join(dir, "echarts-"+report.EChartsVersion+".tgz")
	f, _ := os.Create(tgz)
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "package/dist/echarts.min.js", Mode: 0o644, Size: int64(len(js))})
	tw.Write(js)
	tw.Close()
	zw.Close()
	f.Close()
	code, stdout, stderr := probe(t, "setup", "--tgz", tgz)
	cached := filepath.Join(dir, "cache", "probe", "echarts", report.EChartsVersion, "echarts.min.js")
	if code != 0 || !strings.Contains(stdout, cached) {
		t.Fatalf("setup: exit %d, %s %s", code, stdout, stderr)
	}
	t.Setenv(report.EChartsEnv, "")
	code, stdout, stderr = probe(t, "figures", "--paper", "rt", "--out", "rt2", "--dpi", "30")
	if code != 0 || strings.Contains(stdout, "static SVG") {
		t.Fatalf("after setup: exit %d, %s %s", code, stdout, stderr)
	}
	page, _ := os.ReadFile(filepath.Join(dir, "rt2", "index.html"))
	if strings.Contains(string(page), "(static SVG mode)") || !strings.Contains(string(page), "echarts.init") {
		t.Error("after setup the report is not interactive")
	}
	checkPage(t, chromium, filepath.Join(dir, "rt2", "index.html"), -1)
}
