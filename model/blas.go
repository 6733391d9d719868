package model

// blasName names the BLAS implementation behind the matrix products:
// "gonum" (pure Go, the default) or "openblas" (build tag openblas).
var blasName = "gonum"

// BLAS reports which BLAS implementation this binary uses.
func BLAS() string { return blasName }
