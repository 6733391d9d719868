package client

import (
	"fmt"
	"html"
	"math"
	"strconv"
	"strings"
)

// Palette is the Okabe–Ito colour-blind-safe categorical palette without
// yellow (hard to see on white), black last: the colours of Plot's series.
var Palette = []string{"#d55e00", "#0072b2", "#009e73", "#e69f00", "#cc79a7", "#56b4e9", "#000000"}

// Series is one data series of a Plot.
type Series struct {
	Name    string
	X, Y    []float64
	Scatter bool   // markers instead of a polyline
	Color   string // CSS colour; "" picks from Palette by position
}

// Plot is a line and scatter chart drawn as SVG by this package (no plotting
// library: gophernotes can load only what builds with Go 1.19). NaN values
// break a line and are skipped by markers.
type Plot struct {
	Title, XLabel, YLabel string
	LogY                  bool
	Series                []Series
	// Width and Height are the SVG size in pixels (default 640 × 400).
	Width, Height int
}

// NewPlot returns an empty plot with a title and axis labels.
func NewPlot(title, xlabel, ylabel string) *Plot {
	return &Plot{Title: title, XLabel: xlabel, YLabel: ylabel}
}

// Line adds a polyline series and returns p.
func (p *Plot) Line(name string, x, y []float64) *Plot {
	p.Series = append(p.Series, Series{Name: name, X: x, Y: y})
	return p
}

// Points adds a scatter series and returns p.
func (p *Plot) Points(name string, x, y []float64) *Plot {
	p.Series = append(p.Series, Series{Name: name, X: x, Y: y, Scatter: true})
	return p
}

// HTML shows the plot as inline SVG.
func (p *Plot) HTML() string { return "<div>" + p.SVG() + "</div>" }

// SVG draws the plot. A plot it cannot draw (no finite point, mismatched
// lengths, non-positive values on a log axis) is drawn as a framed message
// saying why, so that the notebook shows the problem.
func (p *Plot) SVG() string {
	W, H := p.Width, p.Height
	if W <= 0 {
		W = 640
	}
	if H <= 0 {
		H = 400
	}
	legendW := 0.0
	for _, s := range p.Series {
		if s.Name != "" {
			legendW = math.Max(legendW, 30+7*float64(len([]rune(s.Name))))
		}
	}
	if legendW > 0 {
		legendW += 10
	}
	left, right, top, bottom := 70.0, 20.0+legendW, 40.0, 55.0
	pw, ph := float64(W)-left-right, float64(H)-top-bottom

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" `+
		`font-family="Liberation Sans, Arial, sans-serif" font-size="13">`, W, H, W, H)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`, W, H)
	if p.Title != "" {
		fmt.Fprintf(&b, `<text x="%g" y="24" text-anchor="middle" font-size="15">%s</text>`, left+pw/2, html.EscapeString(p.Title))
	}
	xmin, xmax, ymin, ymax, err := p.bounds()
	if err != nil {
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#999"/>`, left, top, pw, ph)
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle" fill="#b00">%s</text></svg>`, left+pw/2, top+ph/2,
			html.EscapeString(err.Error()))
		return b.String()
	}
	ty := func(v float64) float64 { return v }
	if p.LogY {
		ty = math.Log10
		ymin, ymax = math.Log10(ymin), math.Log10(ymax)
	}
	xmin, xmax = pad(xmin, xmax, 0)
	ymin, ymax = pad(ymin, ymax, 0.04)
	sx := func(v float64) float64 { return left + (v-xmin)/(xmax-xmin)*pw }
	sy := func(v float64) float64 { return top + ph - (ty(v)-ymin)/(ymax-ymin)*ph }

	// Grid, ticks and labels.
	b.WriteString(`<g stroke="#e5e5e5" stroke-width="1">`)
	xt := ticks(xmin, xmax, 6)
	var yt []float64
	if p.LogY {
		yt = logTicks(ymin, ymax)
	} else {
		yt = ticks(ymin, ymax, 6)
	}
	for _, v := range xt {
		fmt.Fprintf(&b, `<line x1="%.2f" y1="%g" x2="%.2f" y2="%g"/>`, sx(v), top, sx(v), top+ph)
	}
	for _, v := range yt {
		y := top + ph - (v-ymin)/(ymax-ymin)*ph
		fmt.Fprintf(&b, `<line x1="%g" y1="%.2f" x2="%g" y2="%.2f"/>`, left, y, left+pw, y)
	}
	b.WriteString(`</g>`)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`, left, top, pw, ph)
	for _, v := range xt {
		fmt.Fprintf(&b, `<text x="%.2f" y="%g" text-anchor="middle">%s</text>`, sx(v), top+ph+18, tickLabel(v))
	}
	for _, v := range yt {
		y := top + ph - (v-ymin)/(ymax-ymin)*ph
		label := tickLabel(v)
		if p.LogY {
			label = tickLabel(math.Pow(10, v))
		}
		fmt.Fprintf(&b, `<text x="%g" y="%.2f" text-anchor="end" dominant-baseline="middle">%s</text>`, left-6, y, label)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">%s</text>`, left+pw/2, float64(H)-12, html.EscapeString(p.XLabel))
	fmt.Fprintf(&b, `<text transform="translate(18 %g) rotate(-90)" text-anchor="middle">%s</text>`, top+ph/2, html.EscapeString(p.YLabel))

	// Series, clipped to the plot area.
	fmt.Fprintf(&b, `<clipPath id="plotarea"><rect x="%g" y="%g" width="%g" height="%g"/></clipPath><g clip-path="url(#plotarea)">`, left, top, pw, ph)
	for i, s := range p.Series {
		col := s.Color
		if col == "" {
			col = Palette[i%len(Palette)]
		}
		if s.Scatter {
			fmt.Fprintf(&b, `<g fill="%s">`, col)
			for j := range s.X {
				if finite(s.X[j]) && finite(s.Y[j]) {
					fmt.Fprintf(&b, `<circle cx="%.2f" cy="%.2f" r="2.5"/>`, sx(s.X[j]), sy(s.Y[j]))
				}
			}
			b.WriteString(`</g>`)
			continue
		}
		var pts []string
		flush := func() {
			if len(pts) > 1 {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.8" points="%s"/>`, col, strings.Join(pts, " "))
			}
			pts = pts[:0]
		}
		for j := range s.X {
			if !finite(s.X[j]) || !finite(s.Y[j]) {
				flush()
				continue
			}
			pts = append(pts, fmt.Sprintf("%.2f,%.2f", sx(s.X[j]), sy(s.Y[j])))
		}
		flush()
	}
	b.WriteString(`</g>`)

	// Legend, right of the plot area.
	row := 0
	for i, s := range p.Series {
		if s.Name == "" {
			continue
		}
		col := s.Color
		if col == "" {
			col = Palette[i%len(Palette)]
		}
		x, y := left+pw+14, top+10+18*float64(row)
		if s.Scatter {
			fmt.Fprintf(&b, `<circle cx="%g" cy="%g" r="3.5" fill="%s"/>`, x+10, y, col)
		} else {
			fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2.5"/>`, x, y, x+20, y, col)
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g" dominant-baseline="middle">%s</text>`, x+26, y, html.EscapeString(s.Name))
		row++
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// bounds returns the data range over every finite point, or why there is
// nothing to draw.
func (p *Plot) bounds() (xmin, xmax, ymin, ymax float64, err error) {
	xmin, ymin = math.Inf(1), math.Inf(1)
	xmax, ymax = math.Inf(-1), math.Inf(-1)
	for _, s := range p.Series {
		if len(s.X) != len(s.Y) {
			return 0, 0, 0, 0, fmt.Errorf("series %q: %d x values, %d y values", s.Name, len(s.X), len(s.Y))
		}
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if !finite(x) || !finite(y) {
				continue
			}
			if p.LogY && y <= 0 {
				return 0, 0, 0, 0, fmt.Errorf("series %q: y = %g on a log axis", s.Name, y)
			}
			xmin, xmax = math.Min(xmin, x), math.Max(xmax, x)
			ymin, ymax = math.Min(ymin, y), math.Max(ymax, y)
		}
	}
	if xmin > xmax {
		return 0, 0, 0, 0, fmt.Errorf("no finite data to plot")
	}
	return xmin, xmax, ymin, ymax, nil
}

// finite reports whether v is neither NaN nor infinite.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// pad widens [lo, hi] by frac of its length on each side, or by 0.5 around
// a single value.
func pad(lo, hi, frac float64) (float64, float64) {
	if hi == lo {
		return lo - 0.5, hi + 0.5
	}
	d := (hi - lo) * frac
	return lo - d, hi + d
}

// ticks returns about n round tick values (steps of 1, 2 or 5 × 10^k) inside [lo, hi].
func ticks(lo, hi float64, n int) []float64 {
	raw := (hi - lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var out []float64
	for i := math.Ceil(lo / step); i*step <= hi+step*1e-9; i++ {
		out = append(out, i*step)
	}
	return out
}

// logTicks returns the integer powers of ten inside [lo, hi] (log10 units),
// with 2× and 5× between them when the range spans less than two decades.
func logTicks(lo, hi float64) []float64 {
	var out []float64
	for k := math.Floor(lo); k <= math.Ceil(hi); k++ {
		mults := []float64{1}
		if hi-lo < 2 {
			mults = []float64{1, 2, 5}
		}
		for _, m := range mults {
			v := k + math.Log10(m)
			if v >= lo && v <= hi {
				out = append(out, v)
			}
		}
	}
	return out
}

// tickLabel formats a tick value compactly.
func tickLabel(v float64) string {
	if v == 0 {
		return "0"
	}
	a := math.Abs(v)
	if a >= 1e5 || a < 1e-3 {
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 10, 64) // 10 digits hide the rounding of i·step
}
