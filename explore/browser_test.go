package explore

import (
	"context"
	"encoding/json"
	"html"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/filterlens/probe/internal/browser"
)

// TestPageInChromium opens the page in headless Chromium at 1024 and
// 1920 px with ?selftest=1, which clicks a grid cell, then a position of
// the head's series, as mouse events on the charts: the row shown must be
// the hook_pattern row of that query (≤ 1e-6), the page must log no
// error and scroll no page sideways.
func TestPageInChromium(t *testing.T) {
	chromium, err := browser.Find()
	if err != nil {
		t.Skipf("no browser check: %v", err)
	}
	sw := gated(t)
	s, ts := newTestServer(t, sw.dir, Options{})
	if s.echErr != nil {
		t.Skipf("no echarts: %v", s.echErr)
	}
	pre := regexp.MustCompile(`(?s)<pre id="selftest"[^>]*>(.*?)</pre>`)
	for _, width := range []int{1024, 1920} {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		flags := slices.DeleteFunc(slices.Clone(browser.Flags), func(f string) bool {
			return f == "--remote-debugging-port=0" || f == "--window-size=1400,1000" || strings.HasPrefix(f, "--host-resolver-rules=")
		})
		// Every name still fails to resolve; only the test server's loopback address is reached.
		flags = append(flags, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")
		args := append(flags, "--window-size="+itoa(width)+",1000", "--virtual-time-budget=30000", "--dump-dom", ts.URL+"/?selftest=1")
		cmd := exec.CommandContext(ctx, chromium, args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%d px: chromium: %v", width, err)
		}
		m := pre.FindSubmatch(out)
		if m == nil || len(m[1]) == 0 {
			t.Fatalf("%d px: no self-test result in the page: %.400s\n%.2000s", width, out, stderr.String())
		}
		var res struct {
			Errors  []string `json:"errors"`
			Failure string   `json:"failure"`
			Head    struct{ Layer, Head int }
			Row     struct {
				Layer, Head, Query, Tokens int
				Weights                    []float32
			}
			TextLines, ScrollWidth, InnerWidth int
		}
		if err := json.Unmarshal([]byte(html.UnescapeString(string(m[1]))), &res); err != nil {
			t.Fatalf("%d px: %v in %s", width, err, m[1])
		}
		t.Logf("%d px: head %+v, row query %d, %d weights, %d text lines, %d/%d px", width, res.Head, res.Row.Query, len(res.Row.Weights), res.TextLines, res.ScrollWidth, res.InnerWidth)
		if res.Failure != "" || len(res.Errors) > 0 {
			t.Fatalf("%d px: failure %q, console errors %q", width, res.Failure, res.Errors)
		}
		if res.Head.Layer != 2 || res.Head.Head != 3 || res.Row.Layer != 2 || res.Row.Head != 3 || res.Row.Query != 38 || res.Row.Tokens != 39 {
			t.Fatalf("%d px: head %+v, row layer %d head %d query %d with %d tokens; want layer 2 head 3 query 38", width, res.Head, res.Row.Layer, res.Row.Head, res.Row.Query, res.Row.Tokens)
		}
		want := patternRow(t, sw.modelDir, passIDs(sw, 40, 0), 2, 3, 38)
		for j := range want {
			if d := float64(res.Row.Weights[j] - want[j]); d*d > 1e-12*float64(want[j]*want[j]) {
				t.Errorf("%d px: key %d: page %v, hook_pattern %v", width, j, res.Row.Weights[j], want[j])
			}
		}
		if res.TextLines == 0 {
			t.Errorf("%d px: the text view drew no line", width)
		}
		if res.ScrollWidth > res.InnerWidth {
			t.Errorf("%d px: the page is %d px wide (scrolls sideways)", width, res.ScrollWidth)
		}
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
