//go:build !amd64

package kern

// Without amd64 assembly GemmBF16 runs the Go micro-kernel.
const hasBF16 = false
