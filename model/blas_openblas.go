//go:build openblas

package model

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/netlib/blas/netlib"
)

// Built with -tags openblas (and CGO_LDFLAGS=-lopenblas, Debian
// libopenblas-dev), every matrix product of the forward passes runs on
// OpenBLAS instead of gonum's pure-Go kernels.
func init() {
	blas32.Use(netlib.Implementation{})
	blasName = "openblas"
}
