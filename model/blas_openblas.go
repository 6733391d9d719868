//go:build openblas

package model

// #cgo LDFLAGS: -lopenblas
// void openblas_set_num_threads(int);
import "C"

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
)

// Built with -tags openblas (Debian libopenblas-dev), every matrix product
// of the forward passes (float32, and the float64 products of the attention
// moments) runs on OpenBLAS instead of gonum's pure-Go kernels.
// OpenBLAS runs single-threaded: the pass splits work across goroutines
// itself (rows of projections, heads of attention), which avoids OpenBLAS's
// thread pools fighting each other when several goroutines call it.
func init() {
	C.openblas_set_num_threads(1)
	blas32.Use(netlib.Implementation{})
	blas64.Use(netlib.Implementation{})
	blasName = "openblas"
}
