//go:build !amd64

package kern

// Without amd64 assembly GemmBF16 runs the Go micro-kernel.
const hasBF16 = false

// packRowPairs writes the first n pairs of row into column j of a panel
// (dst[p·32+j]).
func packRowPairs(dst []uint32, j int, row []uint16, n int) {
	for p := 0; p < n; p++ {
		dst[p*bfNR+j] = uint32(row[2*p]) | uint32(row[2*p+1])<<16
	}
}

// packPanel is PackPanelBF16 (arguments checked), row by row.
func packPanel(dst []uint32, bits []uint16, stride, kp int) { packPanelRows(dst, bits, stride, kp) }
