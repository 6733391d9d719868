//go:build !(linux && amd64)

package kern

// HasAMX reports whether GemmBF16 runs on AMX: never off linux/amd64.
func HasAMX() bool { return false }
