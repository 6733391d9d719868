package report

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Static text sizes in points, chosen so that a 5.4 in panel stays
// readable when a figure is shown full-width on a slide.
const (
	figTitleSize  = 15
	panelTitleFS  = 13
	axisLabelSize = 12.5
	tickLabelSize = 11
	legendSize    = 10.5
)

func sans(size float64) font.Font {
	return font.Font{Typeface: "Liberation", Variant: "Sans", Size: vg.Points(size)}
}

// PNG renders the figure with gonum/plot as a PNG at dpi dots per inch.
func (f *Figure) PNG(dpi int) ([]byte, error) {
	w, h := f.canvasSize()
	c := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	if err := f.drawStatic(draw.New(c)); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// SVG renders the figure with gonum/plot as a standalone SVG document (fonts
// are referenced by family name, not embedded).
func (f *Figure) SVG() ([]byte, error) {
	w, h := f.canvasSize()
	c := vgsvg.New(w, h)
	dc := draw.New(c)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	if err := f.drawStatic(dc); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

const titleBand = 0.45 // inches above the panels for the figure title

func (f *Figure) canvasSize() (w, h vg.Length) {
	pw, ph := f.panelSize()
	cols := f.columns()
	rows := (len(f.Panels) + cols - 1) / cols
	height := float64(rows) * ph
	if f.Title != "" {
		height += titleBand
	}
	return vg.Length(float64(cols)*pw) * vg.Inch, vg.Length(height) * vg.Inch
}

func (f *Figure) drawStatic(c draw.Canvas) error {
	if err := f.Validate(); err != nil {
		return err
	}
	pw, ph := f.panelSize()
	cols := f.columns()
	top := c.Max.Y
	if f.Title != "" {
		sty := textStyle(figTitleSize, text.XCenter, text.YTop)
		// Shrink a title wider than the canvas until it fits.
		for sty.Font.Size > vg.Points(8) && sty.Rectangle(f.Title).Size().X > c.Max.X-c.Min.X-0.2*vg.Inch {
			sty.Font.Size *= 0.94
		}
		c.FillText(sty, vg.Point{X: c.Center().X, Y: top - 0.08*vg.Inch}, f.Title)
		top -= titleBand * vg.Inch
	}
	for i := range f.Panels {
		r, col := i/cols, i%cols
		x0 := c.Min.X + vg.Length(float64(col)*pw)*vg.Inch
		y1 := top - vg.Length(float64(r)*ph)*vg.Inch
		sub := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x0, Y: y1 - vg.Length(ph)*vg.Inch},
			Max: vg.Point{X: x0 + vg.Length(pw)*vg.Inch, Y: y1},
		}}
		if err := drawPanel(&f.Panels[i], padCanvas(sub, 0.08*vg.Inch)); err != nil {
			return fmt.Errorf("report: figure %s panel %d: %w", f.ID, i, err)
		}
	}
	return nil
}

func padCanvas(c draw.Canvas, m vg.Length) draw.Canvas {
	return draw.Crop(c, m, -m, m, -m)
}

func textStyle(size float64, xa text.XAlignment, ya text.YAlignment) text.Style {
	return text.Style{Color: color.Black, Font: sans(size), XAlign: xa, YAlign: ya, Handler: plot.DefaultTextHandler}
}

// drawPanel draws one panel into c: the plot, and on its right a colour bar
// and/or an outside legend when asked for.
func drawPanel(pn *Panel, c draw.Canvas) error {
	p := plot.New()
	p.Title.Text = pn.Title
	p.Title.TextStyle.Font = sans(panelTitleFS)
	p.Title.Padding = vg.Points(6)
	p.X.Label.Text, p.Y.Label.Text = pn.XLabel, pn.YLabel
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		ax.Label.TextStyle.Font = sans(axisLabelSize)
		ax.Tick.Label.Font = sans(tickLabelSize)
		ax.Label.Padding = vg.Points(4)
	}
	p.X.Padding, p.Y.Padding = vg.Points(4), vg.Points(4)
	if pn.XLog {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = logTicks{}
	}
	if pn.YLog {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
	}
	if !pn.XLog {
		p.X.Tick.Marker = cleanTicks{}
	}
	if !pn.YLog {
		p.Y.Tick.Marker = cleanTicks{}
	}
	ysign := 1.0
	if pn.YDown {
		ysign = -1
		p.Y.Tick.Marker = negTicks{}
	}
	grid := plotter.NewGrid()
	p.Add(grid)
	grid.Vertical.Color = color.Gray{Y: 225}
	grid.Horizontal.Color = color.Gray{Y: 225}
	if pn.NoAxes {
		p.HideAxes()
		grid.Vertical.Width, grid.Horizontal.Width = 0, 0
	}
	if hm := pn.Heatmap; hm != nil {
		grid.Vertical.Width, grid.Horizontal.Width = 0, 0
		p.X.Padding, p.Y.Padding = 0, 0
		p.Add(heatmapImage(hm, ysign))
		if len(hm.XTokens) == hm.Cols && hm.Cols <= maxTokenLabels && hm.DX == 1 {
			p.X.Tick.Marker = tokenTicks{x0: hm.X0, tokens: hm.XTokens, sign: 1}
			p.X.Tick.Label.Rotation = math.Pi / 2
			p.X.Tick.Label.XAlign, p.X.Tick.Label.YAlign = text.XRight, text.YCenter
		}
		if len(hm.YTokens) == hm.Rows && hm.Rows <= maxTokenLabels && hm.DY == 1 {
			p.Y.Tick.Marker = tokenTicks{x0: hm.Y0, tokens: hm.YTokens, sign: ysign}
		}
	}

	leg := &legend{Legend: plot.NewLegend()}
	leg.TextStyle.Font = sans(legendSize)
	leg.ThumbnailWidth = vg.Points(22)
	leg.Padding = vg.Points(3) // keeps the text boxes of adjacent entries apart
	for i := range pn.Series {
		thumbs, err := addSeries(p, &pn.Series[i], pn.Colors, ysign)
		if err != nil {
			return err
		}
		if pn.Series[i].Name != "" && len(thumbs) > 0 {
			leg.add(pn.Series[i].Name, thumbs...)
		}
	}
	applyRanges(p, pn, ysign)

	side := vg.Length(0)
	if pn.Colors != nil || pn.Heatmap != nil {
		side += 0.85 * vg.Inch
	}
	placement := pn.Legend
	if placement == "" {
		placement = LegendTopRight
	}
	if placement == LegendOutside && len(leg.names) > 0 {
		side += leg.width() + 0.15*vg.Inch
	}
	main := draw.Crop(c, 0, -side, 0, 0)
	if pn.Equal {
		equalize(p, main)
	}
	p.Draw(main)

	dataArea := p.DataCanvas(main)
	if len(leg.names) > 0 {
		switch placement {
		case LegendNone:
		case LegendOutside:
			area := draw.Crop(c, c.Max.X-c.Min.X-side+0.1*vg.Inch, 0, 0, -(main.Max.Y - dataArea.Max.Y))
			if pn.Colors != nil || pn.Heatmap != nil {
				area = draw.Crop(area, 0.85*vg.Inch, 0, 0, 0)
			}
			leg.Top, leg.Left = true, true
			leg.Draw(area)
		default:
			leg.drawInside(dataArea, placement)
		}
	}
	if cs := colorScale(pn); cs != nil {
		x0 := main.Max.X + 0.05*vg.Inch
		bar := draw.Canvas{Canvas: c.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: x0, Y: dataArea.Min.Y},
			Max: vg.Point{X: x0 + 0.8*vg.Inch, Y: dataArea.Max.Y},
		}}
		if err := drawColorBar(cs, bar); err != nil {
			return err
		}
	}
	return nil
}

func colorScale(pn *Panel) *ColorScale {
	if pn.Heatmap != nil {
		return &pn.Heatmap.Scale
	}
	return pn.Colors
}

// legend is a gonum legend that remembers its entries' names.
type legend struct {
	plot.Legend
	names []string
}

func (l *legend) add(name string, thumbs ...plot.Thumbnailer) {
	l.Add(name, thumbs...)
	l.names = append(l.names, name)
}

// width is the width the legend's longest entry needs.
func (l *legend) width() vg.Length {
	w := vg.Length(0)
	for _, e := range l.names {
		w = max(w, l.TextStyle.Rectangle(" "+e).Max.X)
	}
	return w + l.ThumbnailWidth + vg.Points(6)
}

// drawInside draws the legend in a corner of the data area on a
// translucent white box so that it stays readable over data.
func (l *legend) drawInside(da draw.Canvas, placement string) {
	pad := vg.Points(5)
	n := len(l.names)
	eh := l.TextStyle.Rectangle("Xg").Max.Y
	w := l.width()
	h := vg.Length(n)*eh + vg.Length(n-1)*l.Padding + vg.Points(4)
	l.Top = placement == LegendTopRight || placement == LegendTopLeft
	l.Left = placement == LegendTopLeft || placement == LegendBottomLeft
	area := draw.Crop(da, pad, -pad, pad, -pad)
	var box vg.Rectangle
	if l.Left {
		box.Min.X, box.Max.X = area.Min.X-3, area.Min.X+w+3
	} else {
		box.Min.X, box.Max.X = area.Max.X-w-3, area.Max.X+3
	}
	if l.Top {
		box.Min.Y, box.Max.Y = area.Max.Y-h-2, area.Max.Y+2
	} else {
		box.Min.Y, box.Max.Y = area.Min.Y-2, area.Min.Y+h+2
	}
	da.SetColor(color.NRGBA{255, 255, 255, 215})
	da.Fill(box.Path())
	l.Draw(area)
}

func drawColorBar(cs *ColorScale, c draw.Canvas) error {
	cm := cs.Map.Copy()
	if cm.Max() <= cm.Min() {
		cm.SetMax(cm.Min() + 1)
	}
	p := plot.New()
	p.Add(&plotter.ColorBar{ColorMap: cm, Vertical: true, Colors: 128})
	p.HideX()
	p.Y.Label.Text = cs.Label
	p.Y.Label.TextStyle.Font = sans(axisLabelSize - 1)
	p.Y.Tick.Label.Font = sans(tickLabelSize - 1)
	p.Y.Tick.Marker = cleanTicks{integer: cs.Integer}
	p.Y.Padding = 0
	p.X.Padding = 0
	// A bar 0.18 in wide at the left edge; labels to its left would collide
	// with the plot, so the axis sits on the bar's right via a crop.
	p.Draw(draw.Crop(c, 0, 0, 0, 0))
	return nil
}

// cleanTicks are the NiceTicks of the range, labelled by TickLabel ("25",
// not "25.00"), with unlabelled minor ticks halfway between; integer ticks
// step by whole numbers only (a layer or head index).
type cleanTicks struct{ integer bool }

func (ct cleanTicks) Ticks(min, max float64) []plot.Tick {
	ticks, step, dec := NiceTicks(min, max, targetTicks)
	if ticks == nil {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	if ct.integer && step < 1 {
		step, dec, ticks = 1, 0, ticks[:0]
		for v := math.Ceil(min); v <= max; v++ {
			ticks = append(ticks, v)
		}
		if len(ticks) == 0 {
			return nil
		}
		var ts []plot.Tick
		for _, v := range ticks {
			ts = append(ts, plot.Tick{Value: v, Label: TickLabel(v, step, dec)})
		}
		return ts
	}
	var ts []plot.Tick
	for _, v := range ticks {
		if m := v - step/2; m >= min {
			ts = append(ts, plot.Tick{Value: m})
		}
		ts = append(ts, plot.Tick{Value: v, Label: TickLabel(v, step, dec)})
	}
	if m := ticks[len(ticks)-1] + step/2; m <= max {
		ts = append(ts, plot.Tick{Value: m})
	}
	return ts
}

// logTicks label every power of ten (every second or third one over
// many decades) as 0.01, 1, 100 or 1e-05, with unlabelled minor ticks at
// 2–9 × 10^k over few decades.
type logTicks struct{}

func (logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0 && max > min) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	lo, hi := int(math.Floor(math.Log10(min))), int(math.Ceil(math.Log10(max)))
	every := 1 + (hi-lo)/8
	var ts []plot.Tick
	for k := lo; k <= hi; k++ {
		v := math.Pow(10, float64(k))
		if v >= min*(1-1e-9) && v <= max*(1+1e-9) {
			t := plot.Tick{Value: v}
			if k%every == 0 {
				t.Label = decade(k)
			}
			ts = append(ts, t)
		}
		if hi-lo <= 4 {
			for m := 2.0; m <= 9; m++ {
				if x := m * v; x >= min && x <= max {
					ts = append(ts, plot.Tick{Value: x})
				}
			}
		}
	}
	return ts
}

// decade formats 10^k.
func decade(k int) string {
	if k >= -3 && k <= 4 {
		return strconv.FormatFloat(math.Pow(10, float64(k)), 'f', max(0, -k), 64)
	}
	return fmt.Sprintf("1e%d", k)
}

// negTicks labels an axis whose data were negated (YDown) with the
// original, positive values.
type negTicks struct{}

func (negTicks) Ticks(min, max float64) []plot.Tick {
	ts := cleanTicks{}.Ticks(min, max)
	_, step, dec := NiceTicks(min, max, targetTicks)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = TickLabel(-ts[i].Value, step, dec)
		}
	}
	return ts
}

// tokenTicks label every cell of a heatmap axis (one cell per token) with
// its token, at the cell centre x0 + c + 1/2 (times sign: a YDown axis is
// drawn negated).
type tokenTicks struct {
	x0     float64
	tokens []string
	sign   float64
}

func (tt tokenTicks) Ticks(min, max float64) []plot.Tick {
	ts := make([]plot.Tick, len(tt.tokens))
	for c, t := range tt.tokens {
		ts[c] = plot.Tick{Value: tt.sign * (tt.x0 + float64(c) + 0.5), Label: shortToken(t)}
	}
	return ts
}

// heatmapImage rasterizes the cells, each as a k×k block of identical
// pixels (k up to 1200 px per side), so that the renderer's image
// interpolation only softens cell borders, never the cells: the static
// equivalent of nearest-neighbour display.
func heatmapImage(h *Heatmap, ysign float64) *plotter.Image {
	k := max(1, 1200/max(h.Rows, h.Cols))
	img := image.NewRGBA(image.Rect(0, 0, h.Cols*k, h.Rows*k))
	for r := 0; r < h.Rows; r++ {
		row := r
		if ysign > 0 {
			row = h.Rows - 1 - r // image row 0 is the top: put matrix row 0 at the bottom
		}
		for c := 0; c < h.Cols; c++ {
			col := h.Scale.Map.Value(h.Z[r*h.Cols+c])
			for dy := 0; dy < k; dy++ {
				for dx := 0; dx < k; dx++ {
					img.SetRGBA(c*k+dx, row*k+dy, col)
				}
			}
		}
	}
	x0, x1 := h.X0, h.X0+float64(h.Cols)*h.DX
	y0, y1 := h.Y0, h.Y0+float64(h.Rows)*h.DY
	if ysign < 0 {
		y0, y1 = -y1, -y0
	}
	return plotter.NewImage(img, x0, y0, x1, y1)
}

// xy is a plotter.XYer (and YErrorer) over parallel slices.
type xy struct {
	x, y, lo, hi []float64
	ys           float64
}

func (d xy) Len() int                        { return len(d.x) }
func (d xy) XY(i int) (float64, float64)     { return d.x[i], d.ys * d.y[i] }
func (d xy) YError(i int) (float64, float64) { return d.y[i] - d.lo[i], d.hi[i] - d.y[i] }

func glyph(s *Series) draw.GlyphDrawer {
	switch s.Shape {
	case Square:
		if s.Hollow {
			return draw.SquareGlyph{}
		}
		return draw.BoxGlyph{}
	case Triangle:
		if s.Hollow {
			return draw.TriangleGlyph{}
		}
		return draw.PyramidGlyph{}
	case Diamond:
		return diamondGlyph{hollow: s.Hollow}
	case Cross:
		return draw.CrossGlyph{}
	}
	if s.Hollow {
		return draw.RingGlyph{}
	}
	return draw.CircleGlyph{}
}

// diamondGlyph is a square rotated by 45°.
type diamondGlyph struct{ hollow bool }

func (g diamondGlyph) DrawGlyph(c *draw.Canvas, sty draw.GlyphStyle, pt vg.Point) {
	r := sty.Radius * 1.25
	var p vg.Path
	p.Move(vg.Point{X: pt.X, Y: pt.Y + r})
	p.Line(vg.Point{X: pt.X + r, Y: pt.Y})
	p.Line(vg.Point{X: pt.X, Y: pt.Y - r})
	p.Line(vg.Point{X: pt.X - r, Y: pt.Y})
	p.Close()
	c.SetColor(sty.Color)
	if g.hollow {
		c.SetLineStyle(draw.LineStyle{Color: sty.Color, Width: vg.Points(1)})
		c.Stroke(p)
		return
	}
	c.Fill(p)
}

func lineStyle(s *Series) draw.LineStyle {
	ls := draw.LineStyle{Color: withAlpha(s.Color, s.alpha()), Width: vg.Points(s.width())}
	if s.Dash {
		ls.Dashes = []vg.Length{vg.Points(6), vg.Points(3.5)}
	}
	return ls
}

// addSeries adds one series to p and returns its legend thumbnails.
func addSeries(p *plot.Plot, s *Series, cs *ColorScale, ysign float64) ([]plot.Thumbnailer, error) {
	switch s.Kind {
	case Line:
		var thumbs []plot.Thumbnailer
		for _, seg := range segments(s.X, s.Y) {
			l, err := plotter.NewLine(xy{x: seg[0], y: seg[1], ys: ysign})
			if err != nil {
				return nil, err
			}
			l.LineStyle = lineStyle(s)
			p.Add(l)
			if thumbs == nil {
				thumbs = []plot.Thumbnailer{l}
			}
		}
		return thumbs, nil
	case Scatter:
		sc, err := plotter.NewScatter(xy{x: s.X, y: s.Y, ys: ysign})
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: withAlpha(s.Color, s.alpha()), Radius: vg.Points(s.radius()), Shape: glyph(s)}
		if s.Values != nil {
			base := sc.GlyphStyle
			sc.GlyphStyleFunc = func(i int) draw.GlyphStyle {
				g := base
				g.Color = withAlpha(cs.Map.Value(s.Values[i]), s.alpha())
				return g
			}
			thumb := *sc
			thumb.GlyphStyle.Color = cs.Map.Frac(0.5)
			p.Add(sc)
			return []plot.Thumbnailer{&thumb}, nil
		}
		p.Add(sc)
		return []plot.Thumbnailer{sc}, nil
	case Band:
		pts := make(plotter.XYs, 0, 2*len(s.X))
		for i := range s.X {
			pts = append(pts, plotter.XY{X: s.X[i], Y: ysign * s.Lo[i]})
		}
		for i := len(s.X) - 1; i >= 0; i-- {
			pts = append(pts, plotter.XY{X: s.X[i], Y: ysign * s.Hi[i]})
		}
		poly, err := plotter.NewPolygon(pts)
		if err != nil {
			return nil, err
		}
		poly.Color = withAlpha(s.Color, s.alpha())
		poly.LineStyle.Width = 0
		p.Add(poly)
		return []plot.Thumbnailer{poly}, nil
	case ErrorBars:
		d := xy{x: s.X, y: s.Y, lo: s.Lo, hi: s.Hi, ys: ysign}
		eb, err := plotter.NewYErrorBars(d)
		if err != nil {
			return nil, err
		}
		eb.LineStyle = draw.LineStyle{Color: s.Color, Width: vg.Points(max(1, s.width()*0.6))}
		eb.CapWidth = vg.Points(6)
		sc, err := plotter.NewScatter(d)
		if err != nil {
			return nil, err
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: s.Color, Radius: vg.Points(s.radius()), Shape: glyph(s)}
		p.Add(eb, sc)
		return []plot.Thumbnailer{sc}, nil
	}
	return nil, fmt.Errorf("unknown series kind %d", s.Kind)
}

// segments splits a polyline at NaN y values.
func segments(x, y []float64) [][2][]float64 {
	var out [][2][]float64
	start := -1
	for i := 0; i <= len(x); i++ {
		gap := i == len(x) || math.IsNaN(y[i])
		if !gap && start < 0 {
			start = i
		}
		if gap && start >= 0 {
			out = append(out, [2][]float64{x[start:i], y[start:i]})
			start = -1
		}
	}
	return out
}

func applyRanges(p *plot.Plot, pn *Panel, ysign float64) {
	if pn.X.Set() {
		p.X.Min, p.X.Max = pn.X.Min, pn.X.Max
	}
	if pn.Y.Set() {
		if ysign < 0 {
			p.Y.Min, p.Y.Max = -pn.Y.Max, -pn.Y.Min
		} else {
			p.Y.Min, p.Y.Max = pn.Y.Min, pn.Y.Max
		}
	}
}

// equalize widens one axis range so that one data unit has the same length
// on both axes of the data area p would draw into c.
func equalize(p *plot.Plot, c draw.Canvas) {
	da := p.DataCanvas(c)
	w, h := float64(da.Max.X-da.Min.X), float64(da.Max.Y-da.Min.Y)
	sx, sy := p.X.Max-p.X.Min, p.Y.Max-p.Y.Min
	if w <= 0 || h <= 0 || sx <= 0 || sy <= 0 {
		return
	}
	if sx/w > sy/h { // x is the coarser axis: widen y
		ny := sx / w * h
		mid := (p.Y.Min + p.Y.Max) / 2
		p.Y.Min, p.Y.Max = mid-ny/2, mid+ny/2
	} else {
		nx := sy / h * w
		mid := (p.X.Min + p.X.Max) / 2
		p.X.Min, p.X.Max = mid-nx/2, mid+nx/2
	}
}
