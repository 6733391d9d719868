//go:build !amd64

package model

// panelProduct is one 32-column panel of a narrow product (gemmPanels,
// which only amd64 builds have).
type panelProduct struct {
	B   []float32
	LDB int
	C   []float32
	LDC int
}

// Without the amd64 kernels gemmPanels and packKT are nil.
const (
	gemmDirectN = 0
	maxKTDepth  = 0
)
