//go:build openblas

package model

// #cgo LDFLAGS: -lopenblas
// void openblas_set_num_threads(int);
// int blas_thread_shutdown_(void);
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
// thread pools fighting each other when several goroutines call it. The
// worker threads OpenBLAS started when it was loaded are shut down too:
// idle, they still spun and yielded, about a tenth of the CPU time of a
// forward pass on a 2-core machine (as if OPENBLAS_NUM_THREADS=1 had been
// set before the process started).
func init() {
	C.openblas_set_num_threads(1)
	C.blas_thread_shutdown_()
	blas32.Use(netlib.Implementation{})
	blas64.Use(netlib.Implementation{})
	blasName = "openblas"
}
