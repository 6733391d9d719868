package report

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot/palette"
)

// Okabe–Ito's eight colour-blind-safe categorical colours (Okabe & Ito,
// "Color Universal Design", 2008), in their usual order. Use them for
// unordered categories (curves of different kinds, target times).
var (
	Black         = color.RGBA{0x00, 0x00, 0x00, 0xff}
	Orange        = color.RGBA{0xe6, 0x9f, 0x00, 0xff}
	SkyBlue       = color.RGBA{0x56, 0xb4, 0xe9, 0xff}
	BluishGreen   = color.RGBA{0x00, 0x9e, 0x73, 0xff}
	Yellow        = color.RGBA{0xf0, 0xe4, 0x42, 0xff}
	Blue          = color.RGBA{0x00, 0x72, 0xb2, 0xff}
	Vermillion    = color.RGBA{0xd5, 0x5e, 0x00, 0xff}
	ReddishPurple = color.RGBA{0xcc, 0x79, 0xa7, 0xff}
	Grey          = color.RGBA{0x99, 0x99, 0x99, 0xff}
)

// OkabeIto is the categorical palette without yellow (hard to see on white)
// and with black last: vermillion, blue, bluish green, orange, reddish
// purple, sky blue, black.
var OkabeIto = []color.RGBA{Vermillion, Blue, BluishGreen, Orange, ReddishPurple, SkyBlue, Black}

// Category returns the i-th categorical colour, cycling through OkabeIto.
func Category(i int) color.RGBA { return OkabeIto[i%len(OkabeIto)] }

// Colormap is a perceptually ordered colour ramp given by evenly spaced
// stops, interpolated linearly in sRGB, mapping [Min(), Max()] to the ramp. It
// implements gonum's palette.ColorMap so plotter.ColorBar can draw it.
type Colormap struct {
	Name   string
	Stops  []color.RGBA
	lo, hi float64
	alpha  float64
}

// Viridis and Magma are 10 evenly spaced samples of matplotlib's viridis and
// magma colour maps (van der Walt & Smith, CC0); linear interpolation
// between them is visually indistinguishable from the 256-entry tables at
// figure resolution. Viridis is for ordered colour (layer index, μ), magma
// for attention maps (as in RFA App. F.3).
var (
	viridisStops = hexStops("#440154", "#482878", "#3e4989", "#31688e", "#26828e",
		"#1f9e89", "#35b779", "#6ece58", "#b5de2b", "#fde725")
	magmaStops = hexStops("#000004", "#180f3d", "#440f76", "#721f81", "#9e2f7f",
		"#cd4071", "#f1605d", "#fd9668", "#feca8d", "#fcfdbf")
)

// Viridis returns the viridis colormap over [min, max].
func Viridis(min, max float64) *Colormap {
	return &Colormap{Name: "viridis", Stops: viridisStops, lo: min, hi: max, alpha: 1}
}

// Magma returns the magma colormap over [min, max].
func Magma(min, max float64) *Colormap {
	return &Colormap{Name: "magma", Stops: magmaStops, lo: min, hi: max, alpha: 1}
}

func hexStops(hs ...string) []color.RGBA {
	out := make([]color.RGBA, len(hs))
	for i, h := range hs {
		var r, g, b uint8
		if _, err := fmt.Sscanf(h, "#%02x%02x%02x", &r, &g, &b); err != nil {
			panic("report: bad colour " + h)
		}
		out[i] = color.RGBA{r, g, b, 0xff}
	}
	return out
}

// Frac returns the colour at fraction f ∈ [0, 1] of the ramp (clamped).
func (m *Colormap) Frac(f float64) color.RGBA {
	if math.IsNaN(f) {
		f = 0
	}
	f = math.Max(0, math.Min(1, f))
	pos := f * float64(len(m.Stops)-1)
	i := int(math.Floor(pos))
	if i >= len(m.Stops)-1 {
		return m.Stops[len(m.Stops)-1]
	}
	t := pos - float64(i)
	a, b := m.Stops[i], m.Stops[i+1]
	mix := func(x, y uint8) uint8 { return uint8(math.Round(float64(x) + t*(float64(y)-float64(x)))) }
	return color.RGBA{mix(a.R, b.R), mix(a.G, b.G), mix(a.B, b.B), 0xff}
}

// Value returns the colour of v on [Min, Max] (clamped).
func (m *Colormap) Value(v float64) color.RGBA {
	if m.hi == m.lo {
		return m.Frac(0.5)
	}
	return m.Frac((v - m.lo) / (m.hi - m.lo))
}

// Samples returns n colours evenly spaced over the ramp, from fraction lo
// to hi (for a few ordered curves, e.g. lo = 0, hi = 0.85 to avoid the
// palest end on white).
func (m *Colormap) Samples(n int, lo, hi float64) []color.RGBA {
	out := make([]color.RGBA, n)
	for i := range out {
		f := lo
		if n > 1 {
			f = lo + (hi-lo)*float64(i)/float64(n-1)
		}
		out[i] = m.Frac(f)
	}
	return out
}

// Hex returns the stops as "#rrggbb" strings (for echarts' visualMap).
func (m *Colormap) Hex() []string {
	out := make([]string, len(m.Stops))
	for i, c := range m.Stops {
		out[i] = Hex(c)
	}
	return out
}

// At implements palette.ColorMap.
func (m *Colormap) At(v float64) (color.Color, error) {
	if v < m.lo || v > m.hi {
		return nil, palette.ErrOverflow
	}
	return m.Value(v), nil
}

// Min returns the value mapped to the start of the ramp.
func (m *Colormap) Min() float64 { return m.lo }

// Max returns the value mapped to the end of the ramp.
func (m *Colormap) Max() float64 { return m.hi }

// SetMax implements palette.ColorMap.
func (m *Colormap) SetMax(v float64) { m.hi = v }

// SetMin implements palette.ColorMap.
func (m *Colormap) SetMin(v float64) { m.lo = v }

// SetAlpha implements palette.ColorMap (ignored: the ramps are opaque).
func (m *Colormap) SetAlpha(a float64) { m.alpha = a }

// Alpha implements palette.ColorMap.
func (m *Colormap) Alpha() float64 { return m.alpha }

// Palette implements palette.ColorMap.
func (m *Colormap) Palette(n int) palette.Palette {
	cs := m.Samples(n, 0, 1)
	out := make(pal, n)
	for i, c := range cs {
		out[i] = c
	}
	return out
}

// Copy returns a copy with its own range.
func (m *Colormap) Copy() *Colormap { c := *m; return &c }

type pal []color.Color

func (p pal) Colors() []color.Color { return p }

// Hex formats an opaque colour as "#rrggbb".
func Hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }

// RGBA formats a colour with opacity a ∈ [0, 1] for CSS/echarts.
func RGBA(c color.RGBA, a float64) string {
	return fmt.Sprintf("rgba(%d,%d,%d,%.3g)", c.R, c.G, c.B, a)
}

// withAlpha returns c with opacity a as a premultiplied color.RGBA.
func withAlpha(c color.RGBA, a float64) color.RGBA {
	if a <= 0 || a >= 1 {
		return c
	}
	return color.RGBA{uint8(float64(c.R) * a), uint8(float64(c.G) * a), uint8(float64(c.B) * a), uint8(255 * a)}
}

// Reds and Blues are short single-hue sequential ramps (ColorBrewer "Reds"
// and "Blues", 4 darkest-usable classes) for the diffusive and integrative
// rows of RFA Figs. 3 and 4, as the paper's figures use Reds and Blues.
// Single-hue luminance ramps stay ordered under every colour-vision
// deficiency.
var (
	Reds  = hexStops("#fc9272", "#fb6a4a", "#cb181d", "#67000d")
	Blues = hexStops("#9ecae1", "#6baed6", "#2171b5", "#08306b")
)
