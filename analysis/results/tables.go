package results

import (
	"fmt"

	"github.com/parquet-go/parquet-go"
)

// ReadTable reads a Parquet file of rows of type T.
func ReadTable[T any](path string) ([]T, error) {
	rows, err := parquet.ReadFile[T](path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return rows, nil
}
