//go:build amd64

package kern

func init() {
	if Available() {
		dequantBlocks = func(dst []float32, blocks, scales []uint8) {
			n := len(scales)
			_, _ = dst[n*MXFP4Block-1], blocks[n*MXFP4Block/2-1]
			dequantMXFP4AVX512(&dst[0], &blocks[0], &scales[0], &mxfp4Values[0], n)
		}
	}
}

//go:noescape
func dequantMXFP4AVX512(dst *float32, blocks, scales *uint8, table *float32, n int)
