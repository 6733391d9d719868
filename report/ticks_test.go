package report

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestNiceTicks(t *testing.T) {
	for _, c := range []struct {
		lo, hi float64
		labels string
	}{
		{0, 1, "0 0.2 0.4 0.6 0.8 1.0"},
		{0, 10, "0 2 4 6 8 10"},
		{-1.5, 1.5, "-1.5 -1.0 -0.5 0 0.5 1.0 1.5"},
		{0.4309370335252, 0.92, "0.5 0.6 0.7 0.8 0.9"},
		{0, 3, "0 0.5 1.0 1.5 2.0 2.5 3.0"},
		{1000, 16384, "2500 5000 7500 10000 12500 15000"},
		{0, 4e-6, "0 1e-06 2e-06 3e-06 4e-06"},
		{-0.3, 0.3, "-0.3 -0.2 -0.1 0 0.1 0.2 0.3"},
	} {
		ticks, step, dec := NiceTicks(c.lo, c.hi, targetTicks)
		var got []string
		for _, v := range ticks {
			got = append(got, TickLabel(v, step, dec))
		}
		if strings.Join(got, " ") != c.labels {
			t.Errorf("NiceTicks(%g, %g): %q, want %q", c.lo, c.hi, strings.Join(got, " "), c.labels)
		}
		for _, v := range ticks {
			if v < c.lo-step*1e-9 || v > c.hi+step*1e-9 {
				t.Errorf("NiceTicks(%g, %g): tick %g outside the range", c.lo, c.hi, v)
			}
		}
	}
	if ticks, _, _ := NiceTicks(1, 1, 5); ticks != nil {
		t.Errorf("empty range: %v", ticks)
	}
}

func TestNiceRange(t *testing.T) {
	for _, c := range []struct{ lo, hi, wlo, whi float64 }{
		{0.4309370335252, 0.92, 0.4, 1.0},
		{1, 27.3, 0, 30},
		{-0.07, 0.93, -0.2, 1.0},
		{5, 5, 4.4, 5.6},
		{0, 0, -1, 1},
	} {
		lo, hi := NiceRange(c.lo, c.hi, targetTicks)
		if !close(lo, c.wlo) || !close(hi, c.whi) {
			t.Errorf("NiceRange(%g, %g) = [%g, %g], want [%g, %g]", c.lo, c.hi, lo, hi, c.wlo, c.whi)
		}
	}
}

func close(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }

// TestCellLabels: heatmap axes are labelled at round token positions
// (never at block centres such as 3.5 or 27.5), by token for short
// sequences, and the tooltip names each cell's positions and token.
func TestCellLabels(t *testing.T) {
	labels, tips := cellLabels(64, -0.5, 300.0/64, nil)
	var shown []string
	for _, l := range labels {
		if l != "" {
			shown = append(shown, l)
		}
	}
	if want := []string{"0", "50", "100", "150", "200", "250"}; !reflect.DeepEqual(shown, want) {
		t.Errorf("blocks of 300 positions: labels %v, want %v", shown, want)
	}
	if tips[0] != "0–4" || tips[63] != "295–299" {
		t.Errorf("block tips %q … %q", tips[0], tips[63])
	}
	labels, tips = cellLabels(4, 0, 1, []string{"The", " cat", "\n", `"x"`})
	if !reflect.DeepEqual(labels, []string{"The", "␣cat", "↵", `"x"`}) || tips[1] != `1 " cat"` {
		t.Errorf("token labels %q, tips %q", labels, tips)
	}
	labels, _ = cellLabels(12, -0.5, 1, nil)
	if strings.Join(labels, ",") != "0,,2,,4,,6,,8,,10," {
		t.Errorf("12 positions: %q", labels)
	}
}

func TestJSStrings(t *testing.T) {
	if got := jsStrings([]string{`a"b\c`, "é </script>"}); got != `['a%22b%5Cc','%C3%A9%20%3C%2Fscript%3E']` {
		t.Errorf("jsStrings: %s", got)
	}
}

func TestCaptionProblems(t *testing.T) {
	f := demoFigure()
	f.Panels = f.Panels[:2] // a heatmap's caption describes its image: only phrases are audited
	for _, c := range []struct{ caption, want string }{
		{"Blue line with a ±0.3 band, a dashed vermillion line, black squares with error bars; diamonds coloured by layer.", ""},
		{"Red diamonds are the paper's values.", `"red diamonds"`},
		{"Green circles.", `"green"`},
		{"The triangles mark the mean.", `"triangle"`},
		{"Left: the sine.", `"Left:"`},
		{"The dotted line is the fit, in the right panel.", `"right panel"`},
	} {
		f.Caption = c.caption
		got := strings.Join(CaptionProblems(f), "\n")
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("caption %q: problems %q, want %s", c.caption, got, c.want)
		}
	}
	f = demoFigure()
	f.Caption = "Red diamonds in the upper triangle of the map; a black band."
	if got := strings.Join(CaptionProblems(f), "\n"); !strings.Contains(got, `"red diamonds"`) || strings.Contains(got, "triangle") || strings.Contains(got, "band") {
		t.Errorf("heatmap figure: %q", got)
	}
}

// TestAxisOption: an echarts axis over a range that starts between two
// multiples of its step still ticks at the multiples (minInterval =
// maxInterval = step; a fixed "interval" would count from the start), its
// labels are sized from NiceTicks, and a log axis is linear in log10 with
// whole decades.
func TestAxisOption(t *testing.T) {
	a := newAxis(-1.1, 0.1, true, false)
	b, err := json.Marshal(a.option("Re λ", 30, false, false, true))
	if err != nil {
		t.Fatal(err)
	}
	var o map[string]any
	if err := json.Unmarshal(b, &o); err != nil {
		t.Fatal(err)
	}
	if lbl, _ := o["axisLabel"].(map[string]any); lbl["alignMinLabel"] != "left" || lbl["hideOverlap"] != true || lbl["formatter"] == nil {
		t.Errorf("axis labels: %v", lbl)
	}
	if o["min"] != -1.1 || o["max"] != 0.1 || o["minInterval"] != 0.25 || o["maxInterval"] != 0.25 || o["interval"] != nil {
		t.Errorf("fixed axis [-1.1, 0.1]: %v", o)
	}
	if strings.Join(a.labels, " ") != "-1.00 -0.75 -0.50 -0.25 0" {
		t.Errorf("labels %q", a.labels)
	}
	if auto := newAxis(0.4309370335252, 0.92, false, false); auto.lo != 0.4 || auto.hi != 1 {
		t.Errorf("automatic range [%g, %g], want [0.4, 1]", auto.lo, auto.hi)
	}
	lg := newAxis(3e-12, 2, false, true)
	if lg.lo != -12 || lg.hi != 1 || lg.step != 2 || strings.Join(lg.labels, " ") != "1e-12 1e-10 1e-8 1e-6 1e-4 0.01 1" {
		t.Errorf("log axis [%g, %g] step %g labels %q", lg.lo, lg.hi, lg.step, lg.labels)
	}
}
