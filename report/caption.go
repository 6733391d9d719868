package report

import (
	"fmt"
	"image/color"
	"regexp"
	"slices"
	"strings"
)

// captionColors names the colours a caption may mention and the series
// colours each name can mean (the Okabe–Ito names and their common
// approximations). Longer names are matched first, so "bluish green" is
// not also "blue".
var captionColors = []struct {
	word   string
	colors []color.RGBA
}{
	{"reddish purple", []color.RGBA{ReddishPurple}},
	{"bluish green", []color.RGBA{BluishGreen}},
	{"sky blue", []color.RGBA{SkyBlue}},
	{"light blue", []color.RGBA{SkyBlue}},
	{"vermillion", []color.RGBA{Vermillion}},
	{"red", []color.RGBA{Vermillion}},
	{"orange", []color.RGBA{Orange, Vermillion}},
	{"blue", []color.RGBA{Blue, SkyBlue}},
	{"green", []color.RGBA{BluishGreen}},
	{"purple", []color.RGBA{ReddishPurple}},
	{"pink", []color.RGBA{ReddishPurple}},
	{"black", []color.RGBA{Black}},
	{"grey", []color.RGBA{Grey}},
	{"gray", []color.RGBA{Grey}},
	{"yellow", []color.RGBA{Yellow}},
}

// markerShapes is the number of leading captionShapes that are markers.
const markerShapes = 5

// captionShapes are the marker and line words a caption may use and the
// test a drawn series must pass for each.
var captionShapes = []struct {
	word string
	ok   func(s *Series) bool
}{
	{"diamond", func(s *Series) bool { return marker(s) && s.Shape == Diamond }},
	{"square", func(s *Series) bool { return marker(s) && s.Shape == Square }},
	{"triangle", func(s *Series) bool { return marker(s) && s.Shape == Triangle }},
	{"circle", func(s *Series) bool { return marker(s) && s.Shape == Circle }},
	{"cross", func(s *Series) bool { return marker(s) && s.Shape == Cross }},
	{"dashed", func(s *Series) bool { return s.Kind == Line && s.Dash }},
	{"band", func(s *Series) bool { return s.Kind == Band }},
	{"error bar", func(s *Series) bool { return s.Kind == ErrorBars }},
}

func marker(s *Series) bool { return s.Kind == Scatter || s.Kind == ErrorBars }

// wordRE matches a whole word or its plural.
func wordRE(w string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)\b` + regexp.QuoteMeta(w) + `(s|es)?\b`)
}

// sideRE matches captions that point at a panel by its place ("Left:",
// "right panel", "top row"): the panels wrap to the page, so a place is
// not where a reader finds the panel; captions name panels by title.
var sideRE = regexp.MustCompile(`(?i)\b(left|right|top|bottom|upper|lower)( (panel|row|column|plot)s?\b|:)`)

// CaptionProblems audits each figure's caption against what it draws: a
// colour and marker named together ("vermillion diamonds") must be one
// series' colour and marker; in figures without heatmaps every colour,
// marker, line style, band or error bar the caption names must be drawn by
// some series (a heatmap's caption describes its image: "the upper
// triangle", "a band along the diagonal", "left black"); and no panel is
// referred to by its place on the page. Every test that builds figures
// runs it.
func CaptionProblems(figs ...*Figure) []string {
	var out []string
	for _, f := range figs {
		out = append(out, captionProblems(f)...)
	}
	return out
}

func captionProblems(f *Figure) []string {
	var series []*Series
	for i := range f.Panels {
		for j := range f.Panels[i].Series {
			series = append(series, &f.Panels[i].Series[j])
		}
	}
	text := strings.ToLower(f.Caption)
	heatmap := false
	for _, p := range f.Panels {
		heatmap = heatmap || p.Heatmap != nil
	}
	var out []string
	for _, c := range captionColors {
		for i, sh := range captionShapes {
			if heatmap && i >= markerShapes {
				continue // "a black band" on a map is part of the image
			}
			re := wordRE(c.word + " " + sh.word)
			if !re.MatchString(text) {
				continue
			}
			found := false
			for _, s := range series {
				found = found || (sh.ok(s) && slices.Contains(c.colors, s.Color))
			}
			if !found {
				out = append(out, fmt.Sprintf("%s: caption says %q but no series draws them", f.ID, re.FindString(text)))
			}
		}
	}
	if len(f.Panels) > 1 {
		if m := sideRE.FindString(f.Caption); m != "" {
			out = append(out, fmt.Sprintf("%s: caption refers to a panel by its place (%q); panels wrap to the page: name it by its title", f.ID, m))
		}
	}
	if heatmap {
		return out
	}
	for _, c := range captionColors {
		re := wordRE(c.word)
		if !re.MatchString(text) {
			continue
		}
		text = re.ReplaceAllString(text, " ")
		found := false
		for _, s := range series {
			for _, col := range c.colors {
				if s.Color == col {
					found = true
				}
			}
		}
		if !found {
			out = append(out, fmt.Sprintf("%s: caption says %q but no series is drawn in that colour", f.ID, c.word))
		}
	}
	for _, sh := range captionShapes {
		if !wordRE(sh.word).MatchString(text) {
			continue
		}
		found := false
		for _, s := range series {
			found = found || sh.ok(s)
		}
		if !found {
			out = append(out, fmt.Sprintf("%s: caption says %q but no series draws one", f.ID, sh.word))
		}
	}
	return out
}
