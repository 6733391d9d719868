package client

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html"
	"image/png"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Image is one PNG figure that probe wrote, with its SVG twin when present.
type Image struct {
	// Name is the figure's file stem, e.g. rfa-fig3.
	Name string
	// Path is the PNG file.
	Path string
	// Data is the PNG file's content.
	Data []byte
	// SVGData is the content of the .svg file beside it (nil if none).
	SVGData []byte
	// Width and Height are the PNG's size in pixels.
	Width, Height int
}

// ReadImage reads a PNG file (and the SVG file of the same stem beside it,
// when there is one) and checks that the PNG decodes.
func ReadImage(path string) (*Image, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	cfg, err := png.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	stem := strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	img := &Image{Name: stem, Path: path, Data: data, Width: cfg.Width, Height: cfg.Height}
	if svg, err := os.ReadFile(strings.TrimSuffix(path, filepath.Ext(path)) + ".svg"); err == nil {
		img.SVGData = svg
	}
	return img, nil
}

// PNG returns the PNG file's content.
func (im *Image) PNG() []byte { return im.Data }

// HTML shows the PNG inline, at most as wide as the notebook, named below.
func (im *Image) HTML() string {
	return fmt.Sprintf(`<figure style="margin:0.5em 0"><img alt="%s" style="max-width:100%%" src="data:image/png;base64,%s">`+
		`<figcaption>%s</figcaption></figure>`,
		html.EscapeString(im.Name), base64.StdEncoding.EncodeToString(im.Data), html.EscapeString(im.Path))
}

// Gallery is the set of figures in one output folder.
type Gallery struct {
	Dir    string
	Images []*Image
	// Page is the HTML report probe wrote beside them ("" if none).
	Page string
}

// ReadGallery reads every PNG in dir, sorted by name.
func ReadGallery(dir string) (*Gallery, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.png"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	g := &Gallery{Dir: dir}
	for _, p := range paths {
		im, err := ReadImage(p)
		if err != nil {
			return nil, err
		}
		g.Images = append(g.Images, im)
	}
	if len(g.Images) == 0 {
		return nil, fmt.Errorf("client: no PNG figures in %s", dir)
	}
	if _, err := os.Stat(filepath.Join(dir, "index.html")); err == nil {
		g.Page = filepath.Join(dir, "index.html")
	}
	return g, nil
}

// Names returns the figure names in order.
func (g *Gallery) Names() []string {
	out := make([]string, len(g.Images))
	for i, im := range g.Images {
		out[i] = im.Name
	}
	return out
}

// Image returns the figure called name, or nil.
func (g *Gallery) Image(name string) *Image {
	for _, im := range g.Images {
		if im.Name == name {
			return im
		}
	}
	return nil
}

// HTML shows every figure, one below the other.
func (g *Gallery) HTML() string {
	var b strings.Builder
	for _, im := range g.Images {
		b.WriteString(im.HTML())
	}
	if g.Page != "" {
		fmt.Fprintf(&b, `<p>Report page with captions and parameters: <code>%s</code></p>`, html.EscapeString(g.Page))
	}
	return b.String()
}
