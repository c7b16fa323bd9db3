package chdb_test

import (
	"context"
	"os"
	"testing"
)

func TestZZProbe(t *testing.T) {
	e := engine(t)
	out, err := e.Query(context.Background(), os.Getenv("Q"), "PrettyCompactMonoBlock")
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + string(out))
}
