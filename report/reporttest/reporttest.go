// Package reporttest is the browser check that every test which writes a
// report runs on it: the page opened offline in headless Chromium at
// 1024, 1280 and 1920 px must make no network request, log no error, draw
// every chart, scroll no page sideways, and show no overlapping or clipped
// text (see package browser for how each is measured).
package reporttest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/internal/browser"
)

// Browser returns the Chromium binary, or "" with the reason logged when
// none is installed (CI installs Debian's chromium in .ci/setup.sh).
func Browser(t testing.TB) string {
	t.Helper()
	chromium, err := browser.Find()
	if err != nil {
		t.Logf("no browser check: %v", err)
		return ""
	}
	return chromium
}

// Check opens the report html in chromium and fails t on every problem the
// browser check finds, and when the page has other than wantCharts chart
// containers (wantCharts < 0: any number). With chromium "" it does
// nothing. $PROBE_KEEP_SCREENSHOTS names a folder that receives, per
// checked report, a screenshot of the page's first screen and of every
// chart at 1280 px.
func Check(t testing.TB, chromium, html string, wantCharts int) *browser.Result {
	t.Helper()
	if chromium == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute) // a page of ~90 charts takes ~1 min on 2 loaded cores
	defer cancel()
	res, err := browser.Check(ctx, chromium, html)
	if err != nil {
		t.Fatalf("browser check of %s: %v", html, err)
	}
	name := filepath.Base(filepath.Dir(html)) + "/" + filepath.Base(html)
	for _, p := range res.Problems(0.02) {
		t.Errorf("%s: %s", name, p)
	}
	if wantCharts >= 0 && len(res.Charts) != wantCharts {
		t.Errorf("%s: %d chart containers, want %d", name, len(res.Charts), wantCharts)
	}
	var files []string
	for _, u := range res.Requests {
		if !strings.HasPrefix(u, "data:") { // inline images of the static SVG
			files = append(files, u)
		}
	}
	if len(files) != 1 || !strings.HasPrefix(files[0], "file://") {
		t.Errorf("%s: requests %v, want only the page itself", name, files)
	}
	if dir := os.Getenv("PROBE_KEEP_SCREENSHOTS"); dir != "" {
		stem := filepath.Join(dir, strings.NewReplacer("/", "_", " ", "_").Replace(t.Name()+"_"+name))
		if err := os.WriteFile(stem+".png", res.Page, 0o644); err != nil {
			t.Log(err)
		}
		for i, c := range res.Charts {
			os.WriteFile(fmt.Sprintf("%s_chart%02d_%s.png", stem, i, c.ID), c.PNG, 0o644)
		}
	}
	return res
}
