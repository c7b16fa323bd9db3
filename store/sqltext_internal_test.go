package store

import (
	"testing"
)

func TestTypeArgs(t *testing.T) {
	name, args := typeArgs("Map(LowCardinality(String), Array(Tuple(a String, b DateTime64(6, 'UTC'))))")
	if name != "Map" || len(args) != 2 || args[0] != "LowCardinality(String)" || args[1] != "Array(Tuple(a String, b DateTime64(6, 'UTC')))" {
		t.Fatalf("%q %q", name, args)
	}
}
