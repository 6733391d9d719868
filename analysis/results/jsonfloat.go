package results

import (
	"bytes"
	"math"
	"strconv"
)

// Float is a float64 that JSON encodes NaN and ±Inf as null (plain float64
// cannot be encoded when it is not finite) and decodes null as NaN. It is
// used in summaries, where undefined statistics are NaN.
type Float float64

// MarshalJSON implements json.Marshaler.
func (f Float) MarshalJSON() ([]byte, error) {
	x := float64(f)
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return []byte("null"), nil
	}
	return strconv.AppendFloat(nil, x, 'g', -1, 64), nil
}

// UnmarshalJSON implements json.Unmarshaler.
func (f *Float) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*f = Float(math.NaN())
		return nil
	}
	x, err := strconv.ParseFloat(string(b), 64)
	*f = Float(x)
	return err
}
