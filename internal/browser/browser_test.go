package browser

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCheckFindsProblems proves the check fails pages it should fail: an
// external request, console errors, an exception, a blank chart.
func TestCheckFindsProblems(t *testing.T) {
	chromium, err := Find()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	page := filepath.Join(dir, "bad.html")
	os.WriteFile(page, []byte(`<!DOCTYPE html><html><body>
<div class="chart" id="blank" style="width:200px;height:100px"></div>
<div class="chart" id="drawn" style="width:200px;height:100px"><canvas id="c" width="200" height="100"></canvas></div>
<img src="http://example.invalid/x.png">
<script>
var g = document.getElementById('c').getContext('2d');
g.fillStyle = '#0072b2'; g.fillRect(10, 10, 120, 60); g.fillStyle = '#d55e00'; g.fillRect(60, 40, 120, 50);
console.error('boom');
undefinedFunction();
</script></body></html>`), 0o644)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := Check(ctx, chromium, page)
	if err != nil {
		t.Fatal(err)
	}
	probs := strings.Join(res.Problems(0.02), "\n")
	for _, want := range []string{"external request: http://example.invalid/x.png", "console.error: boom", "undefinedFunction", `chart "blank"`} {
		if !strings.Contains(probs, want) {
			t.Errorf("problems lack %q:\n%s", want, probs)
		}
	}
	if strings.Contains(probs, `chart "drawn"`) {
		t.Errorf("the drawn chart was flagged:\n%s", probs)
	}
	if len(res.Charts) != 2 || res.Charts[1].NonBlank < 0.3 {
		t.Errorf("charts %+v", res.Charts)
	}
}

// TestCheckFindsLayoutProblems proves the layout assertions fail a page
// they should fail: content wider than the viewport, two overlapping tick
// labels, a label outside its chart and a caption cut off by its box; and
// pass the same page once it is fixed.
func TestCheckFindsLayoutProblems(t *testing.T) {
	chromium, err := Find()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	page := func(wide, overlap, outside, cut string) string {
		return `<!DOCTYPE html><html><body style="margin:0">
<div style="width:` + wide + `;height:20px;background:#eee"></div>
<div class="chart" id="c1" style="width:300px;height:150px"><svg width="300" height="150">
<rect x="20" y="20" width="200" height="100" fill="#0072b2"/><rect x="60" y="40" width="100" height="60" fill="#d55e00"/>
<text x="10" y="140" font-size="12">0.25</text><text x="` + overlap + `" y="140" font-size="12">0.5009370335252</text>
<text x="` + outside + `" y="20" font-size="12">colour bar title</text>
</svg></div>
<p style="width:120px;white-space:nowrap;overflow:hidden">` + cut + `</p>
</body></html>`
	}
	dir := t.TempDir()
	check := func(name, html string) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, []byte(html), 0o644)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		res, err := Check(ctx, chromium, p)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Layouts) != len(LayoutWidths) {
			t.Errorf("%s: %d layouts, want %d", name, len(res.Layouts), len(LayoutWidths))
		}
		return strings.Join(res.Problems(0.02), "\n")
	}
	probs := check("broken.html", page("1500px", "20", "250", "a caption much too long for its box"))
	for _, want := range []string{
		"at 1280 px the page scrolls sideways: 1500 px", "at 1024 px the page scrolls sideways",
		`overlapping text: c1: "0.25"`, `clipped text: c1: "colour bar title"`, `clipped text: <p> "a caption much`,
	} {
		if !strings.Contains(probs, want) {
			t.Errorf("problems lack %q:\n%s", want, probs)
		}
	}
	if strings.Contains(probs, "1920 px the page scrolls") {
		t.Errorf("1500 px of content flagged at 1920 px:\n%s", probs)
	}
	if probs := check("fixed.html", page("100%", "80", "150", "short")); probs != "" {
		t.Errorf("the fixed page has problems:\n%s", probs)
	}
}
