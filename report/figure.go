// Package report turns figure descriptions into one self-contained, offline
// HTML report plus static PNG and SVG files beside it.
//
// A Figure is declarative: panels of line, scatter, band and error-bar
// series or a heatmap, with axis labels in the papers' symbols. Each figure
// is drawn twice from the same description:
//
//   - interactively with go-echarts, for the HTML report (the echarts
//     library, echarts.min.js from the npm package installed at setup, is
//     inlined once per report; see LocateECharts), or as inline SVG when
//     WriteOptions.Static is set;
//   - statically with gonum/plot, as <id>.png and <id>.svg for papers and
//     slides.
//
// Beside the panels every figure carries a caption (what is plotted and the
// protocol), the options it was made with (each with where its value comes
// from) and, where a paper reports numbers, a paper-vs-ours table. The HTML
// page declares a Content-Security-Policy that forbids every network
// request, so a report that renders at all renders offline.
//
// Colours: Okabe–Ito for categories, viridis for ordered colour (layer
// index, μ), magma for attention maps; see color.go.
package report

import (
	"fmt"
	"image/color"
	"math"
	"regexp"
)

// Option is one setting a figure was made with, shown in its caption: a
// parameter value and where it comes from (a paper section, a notes file,
// or "choice" for a value this tool picked where the paper is silent).
type Option struct {
	Name, Value, Source string
}

// Table is a small table shown under a figure, e.g. the paper's numbers
// beside ours.
type Table struct {
	Caption string
	Header  []string
	Rows    [][]string
}

// Figure is one figure of a report.
type Figure struct {
	ID      string // file stem of <ID>.png/.svg and HTML anchor: letters, digits, '-', '_'
	Title   string
	Caption string // what is plotted and how (the protocol)
	Options []Option
	Tables  []Table
	Notes   []string // extra remarks (deviations, ambiguities)
	Panels  []Panel
	Columns int // panels per row (default: 2, or 1 for a single panel)
	// PanelWidth and PanelHeight are one static panel's size in inches
	// (default 5.4 × 4); the HTML chart size follows in pixels (×100).
	PanelWidth, PanelHeight float64
}

// Legend placements.
const (
	LegendTopRight    = "top-right"
	LegendTopLeft     = "top-left"
	LegendBottomRight = "bottom-right"
	LegendBottomLeft  = "bottom-left"
	LegendOutside     = "outside" // a column right of the plot area (never overlaps data)
	LegendNone        = "none"
)

// Panel is one set of axes.
type Panel struct {
	Title          string
	XLabel, YLabel string
	XLog, YLog     bool
	X, Y           Range // fixed axis ranges (zero value: automatic)
	// YDown draws the y axis increasing downwards (matrix convention: row 0
	// at the top), as attention maps are drawn.
	YDown bool
	// Equal asks for equal data units on both axes (complex planes,
	// trajectories, the sphere).
	Equal bool
	// NoAxes hides both axes (a projection of 3-D geometry).
	NoAxes  bool
	Legend  string // one of the Legend* placements (default LegendTopRight)
	Series  []Series
	Heatmap *Heatmap
	// Colors maps Series.Values of scatter series to colour; it also gets a
	// colour bar labelled Colors.Label.
	Colors *ColorScale
}

// Range is a fixed axis range; the zero value means automatic.
type Range struct{ Min, Max float64 }

// Set reports whether the range is fixed.
func (r Range) Set() bool { return r.Max > r.Min }

// Kind is a series kind.
type Kind int

// Series kinds.
const (
	Line      Kind = iota // polyline through (X, Y); NaN in Y breaks it
	Scatter               // markers at (X, Y)
	Band                  // filled area between Lo and Hi over X (e.g. ±1 std)
	ErrorBars             // vertical bars from Lo to Hi at X, with a marker at Y
)

// Shape is a marker shape.
type Shape int

// Marker shapes.
const (
	Circle Shape = iota
	Square
	Triangle
	Diamond
	Cross
)

// Series is one drawn data series.
type Series struct {
	Name   string // legend entry; empty: not in the legend
	Kind   Kind
	X, Y   []float64
	Lo, Hi []float64 // Band and ErrorBars
	Color  color.RGBA
	Alpha  float64 // opacity in (0, 1]; 0 means 1 (Band default 0.25)
	Width  float64 // line width in points (default 2)
	Dash   bool
	Radius float64 // marker radius in points (default 3)
	Shape  Shape
	Hollow bool // draw markers as outlines
	// Values colours each scatter point through Panel.Colors.
	Values []float64
}

// ColorScale maps values to a colormap and labels the colour bar.
type ColorScale struct {
	Label string
	Map   *Colormap // Min and Max give the range
	// Integer marks a quantity that takes whole values (a layer or head
	// index): the colour bar is labelled with whole numbers only.
	Integer bool
}

// Heatmap is a matrix drawn as coloured cells: row r, column c covers
// x ∈ [X0 + c·DX, X0 + (c+1)·DX], y ∈ [Y0 + r·DY, Y0 + (r+1)·DY]. With
// Panel.YDown row 0 is at the top.
type Heatmap struct {
	Rows, Cols int
	Z          []float64 // row-major, len Rows·Cols
	X0, DX     float64
	Y0, DY     float64
	Scale      ColorScale
	// XTokens and YTokens, when set, hold the token string of each column
	// and row (one cell per token): shown on hover, and as the axis labels
	// of sequences of at most 40 tokens.
	XTokens, YTokens []string
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`)

// Validate checks a figure for mistakes that would make a broken drawing:
// mismatched lengths, unknown legend placements, empty panels, log axes with
// non-positive data.
func (f *Figure) Validate() error {
	if !idPattern.MatchString(f.ID) {
		return fmt.Errorf("report: figure id %q: use letters, digits, '-' and '_'", f.ID)
	}
	if len(f.Panels) == 0 {
		return fmt.Errorf("report: figure %s has no panels", f.ID)
	}
	for i, p := range f.Panels {
		where := fmt.Sprintf("report: figure %s panel %d", f.ID, i)
		switch p.Legend {
		case "", LegendTopRight, LegendTopLeft, LegendBottomRight, LegendBottomLeft, LegendOutside, LegendNone:
		default:
			return fmt.Errorf("%s: unknown legend placement %q", where, p.Legend)
		}
		if len(p.Series) == 0 && p.Heatmap == nil {
			return fmt.Errorf("%s: nothing to draw", where)
		}
		if h := p.Heatmap; h != nil {
			if h.Rows < 1 || h.Cols < 1 || len(h.Z) != h.Rows*h.Cols || h.Scale.Map == nil {
				return fmt.Errorf("%s: heatmap %d×%d with %d values", where, h.Rows, h.Cols, len(h.Z))
			}
			if (h.XTokens != nil && len(h.XTokens) != h.Cols) || (h.YTokens != nil && len(h.YTokens) != h.Rows) {
				return fmt.Errorf("%s: %d column and %d row tokens for a %d×%d heatmap (want one per cell)", where, len(h.XTokens), len(h.YTokens), h.Rows, h.Cols)
			}
		}
		for j, s := range p.Series {
			sw := fmt.Sprintf("%s series %d (%q)", where, j, s.Name)
			if len(s.X) != len(s.Y) && s.Kind != Band {
				return fmt.Errorf("%s: %d x values, %d y values", sw, len(s.X), len(s.Y))
			}
			if (s.Kind == Band || s.Kind == ErrorBars) && (len(s.Lo) != len(s.X) || len(s.Hi) != len(s.X)) {
				return fmt.Errorf("%s: band/error bars need Lo and Hi of length %d", sw, len(s.X))
			}
			if s.Values != nil && (len(s.Values) != len(s.X) || p.Colors == nil || p.Colors.Map == nil) {
				return fmt.Errorf("%s: Values need one value per point and Panel.Colors", sw)
			}
			if len(s.X) == 0 {
				return fmt.Errorf("%s: empty", sw)
			}
			for k, x := range s.X {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					return fmt.Errorf("%s: x[%d] = %g", sw, k, x)
				}
				if p.XLog && x <= 0 {
					return fmt.Errorf("%s: x[%d] = %g on a log axis", sw, k, x)
				}
			}
			ys := [][]float64{s.Y, s.Lo, s.Hi}
			for _, col := range ys {
				for k, y := range col {
					if math.IsInf(y, 0) || (p.YLog && y <= 0) {
						return fmt.Errorf("%s: y[%d] = %g", sw, k, y)
					}
				}
			}
		}
	}
	return nil
}

func (f *Figure) columns() int {
	if f.Columns > 0 {
		return min(f.Columns, len(f.Panels))
	}
	return min(2, len(f.Panels))
}

func (f *Figure) panelSize() (w, h float64) {
	w, h = f.PanelWidth, f.PanelHeight
	if w <= 0 {
		w = 5.4
	}
	if h <= 0 {
		h = 4
	}
	return w, h
}

func (s *Series) alpha() float64 {
	if s.Alpha > 0 && s.Alpha <= 1 {
		return s.Alpha
	}
	if s.Kind == Band {
		return 0.25
	}
	return 1
}

func (s *Series) width() float64 {
	if s.Width > 0 {
		return s.Width
	}
	return 2
}

func (s *Series) radius() float64 {
	if s.Radius > 0 {
		return s.Radius
	}
	return 3
}
