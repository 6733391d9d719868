//go:build !(linux && amd64)

package kern

// HasAMX reports whether GemmBF16 runs on AMX: never off linux/amd64.
func HasAMX() bool { return false }

// PackedBF16 is the packed W of GemmPacked, which runs on AMX only.
type PackedBF16 struct{}

// PackRowsBF16 panics off linux/amd64: GemmPacked runs on AMX only.
func PackRowsBF16(w *PackedBF16, x []float32, ldx, n, k int) { panic("kern: no AMX") }

// PackColsSplit panics off linux/amd64: GemmPacked runs on AMX only.
func PackColsSplit(w *PackedBF16, x []float32, ldx, rows, cols int) { panic("kern: no AMX") }

// GemmPacked panics off linux/amd64: callers check HasAMX.
func GemmPacked(m, n, k int, x []float32, ldx int, w *PackedBF16, c []float32, ldc int) {
	panic("kern: no AMX")
}

// GemmF32AMX needs AMX (HasAMX is false here).
func GemmF32AMX(m, n, k int, x []float32, ldx int, w PairSource, c []float32, ldc int) {
	panic("kern: no AMX")
}
